package pico

import (
	"context"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// BenchmarkSSETailPage: what a live SSE reader at the tail does once an
// append wakes it, before its write: nextPage (Head, page cache, Read of
// the batch just appended) and the event's rendering. One 100 B record
// per op; the append itself is outside the timer.
func BenchmarkSSETailPage(b *testing.B) {
	s := newServer(b, Config{}, stream.Config{})
	s.create("/t", "application/octet-stream")
	h := New(s.env.Svc, s.cfg)
	ctx := context.Background()
	// As the live-tail row's records: a send time, then padding.
	val := []byte("1764950000000000000 " + strings.Repeat("x", 80))
	p := readParams{}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		res, err := s.env.Svc.Append(ctx, "/t", []record.Record{{Value: val}})
		if err != nil {
			b.Fatal(err)
		}
		p.offset = res.FirstOffset
		b.StartTimer()
		pg, err := h.nextPage(ctx, "/t", p)
		if err != nil || pg.count != 1 {
			b.Fatalf("page %+v, %v", pg, err)
		}
		buf = appendSSEPage(buf[:0], pg, h.nextCursorValue(""))
	}
}
