package pico

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// BenchmarkAppendHTTP measures appends through the handler over a real
// service and loopback HTTP, in process, for profiling the Pico layer
// (e2e/bench has the end-to-end numbers against the real binary).
func BenchmarkAppendHTTP(b *testing.B) {
	for _, c := range []struct {
		shape      string
		per, size  int
		concurrent int
	}{
		{"single", 1, 1024, 16},
		{"batch", 100, 1024, 1},
		{"batch", 100, 1024, 16},
	} {
		b.Run(fmt.Sprintf("%s-%dx%dB-c%d", c.shape, c.per, c.size, c.concurrent), func(b *testing.B) {
			s := newServer(b, Config{}, stream.Config{})
			s.create("/b", "application/octet-stream")
			val := bytes.Repeat([]byte{'v'}, c.size)
			body, ct := val, "application/octet-stream"
			if c.shape == "batch" {
				recs := make([]codec.Record, c.per)
				for i := range recs {
					recs[i].Value = val
				}
				body, ct = codec.Encode(recs), wire.MediaBatch
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.concurrent * runtime.GOMAXPROCS(0)}}
			b.SetBytes(int64(c.per * c.size))
			b.ReportAllocs()
			b.SetParallelism(c.concurrent)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", s.URL+"/b", bytes.NewReader(body))
					req.Header.Set("Content-Type", ct)
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkSSEFanout parks 1,000 SSE readers on one stream and measures
// one append delivered to all of them (in process, for profiling; the
// end-to-end figure is e2e/bench's).
func BenchmarkSSEFanout(b *testing.B) {
	const readers = 1000
	s := newServer(b, Config{SSETimeout: time.Hour}, stream.Config{})
	s.create("/f", "text/plain")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: readers}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int64
	var ready sync.WaitGroup
	ready.Add(readers)
	for i := 0; i < readers; i++ {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/f?live=sse", nil)
			resp, err := client.Do(req)
			if err != nil {
				ready.Done()
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 32<<10)
			first := true
			for {
				n, err := resp.Body.Read(buf)
				if first {
					first = false
					ready.Done()
				} else {
					got.Add(int64(bytes.Count(buf[:n], []byte("event: data"))))
				}
				if err != nil {
					return
				}
			}
		}()
	}
	ready.Wait()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := int64(i+1) * readers
		s.do("POST", "/f", []byte("x"))
		for got.Load() < want {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*readers), "µs/delivery")
}
