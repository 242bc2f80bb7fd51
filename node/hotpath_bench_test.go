package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAppendHTTPNode measures single-record Pico appends (100 B, one
// stream per client) through a whole node: listener, metrics, append
// budget, routing, the Pico handler, the stream service and the WAL with
// fdatasync, over loopback HTTP/1.1 keep-alive. The baseline in the same
// run, "floor", is the same client against a net/http server that answers
// every POST with a fixed JSON ack at once: what HTTP alone costs here.
// allocs/op, B/op and cpu-µs/op count client and server together; the
// node's own cost is the difference to the floor.
func BenchmarkAppendHTTPNode(b *testing.B) {
	body := bytes.Repeat([]byte{'v'}, 100)
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("floor/c%d", clients), func(b *testing.B) {
			ack := []byte(`{"offset":0,"nextOffset":1,"timestamp":0,"count":1}` + "\n")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(ack)
			})}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			runAppendClients(b, "http://"+ln.Addr().String(), clients, body)
		})
		b.Run(fmt.Sprintf("node/c%d", clients), func(b *testing.B) {
			n := startBenchNode(b)
			runAppendClients(b, "http://"+n.Addr(), clients, body)
		})
		b.Run(fmt.Sprintf("node-nethttp/c%d", clients), func(b *testing.B) {
			n := startBenchNode(b, "--http-fast-path=false") // every request through net/http
			runAppendClients(b, "http://"+n.Addr(), clients, body)
		})
	}
}

// startBenchNode starts a node on loopback (Kafka off, local object store)
// and stops it when the benchmark ends.
func startBenchNode(b *testing.B, args ...string) *Node {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(b, ctx, b.TempDir(), nil, args...)
	shutdownAtEnd(b, n)
	return n
}

// startTestNode starts a node on loopback (Kafka off) with its data in
// dir and args added to the flags; configure, when not nil, adjusts the
// parsed config. Its log is discarded.
func startTestNode(tb testing.TB, ctx context.Context, dir string, configure func(*Config), args ...string) *Node {
	tb.Helper()
	cfg, err := ParseServeFlags(append([]string{"--data-dir", dir, "--http-addr", "127.0.0.1:0", "--kafka-addr", "off"}, args...),
		func(string) string { return "" }, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	if configure != nil {
		configure(&cfg)
	}
	n, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// shutdownAtEnd shuts n down when the test or benchmark ends.
func shutdownAtEnd(tb testing.TB, n *Node) {
	tb.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 30*time.Second)
		defer c()
		_ = n.Shutdown(sctx)
	})
}

// sendBytes sends body as application/octet-stream, reads the answer to
// its end (so the connection is reused) and returns its status.
func sendBytes(client *http.Client, method, url string, body []byte) (int, error) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// runAppendClients creates one stream per client, then lets the clients
// (closed loop, one keep-alive connection each) share b.N appends.
func runAppendClients(b *testing.B, base string, clients int, body []byte) {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	do := func(method, url string, body []byte) error {
		code, err := sendBytes(client, method, url, body)
		if err == nil && code/100 != 2 {
			err = fmt.Errorf("%s %s: status %d", method, url, code)
		}
		return err
	}
	prefix := base + "/bench/" + strings.ReplaceAll(b.Name(), "/", "-")
	for i := 0; i < clients; i++ {
		if err := do("PUT", fmt.Sprintf("%s/%d", prefix, i), nil); err != nil {
			b.Fatal(err)
		}
	}
	var next, failed atomic.Int64
	done := make(chan error, clients)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < clients; i++ {
		url := fmt.Sprintf("%s/%d", prefix, i)
		go func() {
			for next.Add(1) <= int64(b.N) {
				if err := do("POST", url, body); err != nil {
					failed.Add(1)
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := 0; i < clients; i++ {
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the user+system CPU time of this process so far (client
// and server together, every thread): CPU per operation is a figure a
// busy machine distorts far less than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
