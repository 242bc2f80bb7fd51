package picomq_test

import (
	"bufio"
	"context"
	"net"
	"net/textproto"
	"testing"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// cannedAck is a node's answer to a one-record Pico append, as captured
// from picomq serve.
const cannedAck = "HTTP/1.1 200 OK\r\nPico-Offset: 0\r\nPico-Next-Offset: 1\r\nPico-Timestamp: 1796227362118\r\n" +
	"Pico-Record-Count: 1\r\nContent-Type: application/json\r\nPico-Served-By: vm\r\n" +
	"Date: Wed, 02 Dec 2026 16:02:42 GMT\r\nContent-Length: 64\r\n\r\n" +
	`{"offset":0,"nextOffset":1,"timestamp":1796227362118,"count":1}` + "\n"

// serveCanned answers every request on ln with cannedAck, doing as little
// as it can, so that a benchmark against it measures mostly the client.
func serveCanned(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer nc.Close()
			tr := textproto.NewReader(bufio.NewReader(nc))
			for {
				if _, err := tr.ReadLine(); err != nil { // the request line
					return
				}
				n, err := picomq.ReadRequestHead(tr)
				if err != nil {
					return
				}
				if _, err := tr.R.Discard(n); err != nil {
					return
				}
				if _, err := nc.Write([]byte(cannedAck)); err != nil {
					return
				}
			}
		}()
	}
}

// BenchmarkAppendCanned is the client's cost of one Stream.Append (100 B)
// against a server that answers at once with a canned ack: CPU and
// allocations per append of the request path, lean transport or net/http.
func BenchmarkAppendCanned(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go serveCanned(ln)
	rec := picomq.AppendRecord{Body: make([]byte, 100)}
	for _, tc := range []struct {
		name string
		opts []picomq.Option
	}{{"lean", nil}, {"std", []picomq.Option{picomq.WithStdTransport()}}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := picomq.NewPico("http://"+ln.Addr().String(), tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s := c.Stream("/bench/canned")
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Append(ctx, rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
