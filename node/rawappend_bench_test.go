package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkAppendRawNode measures the node's own cost per small append:
// one 100 B record per request over one keep-alive connection, from a
// client that writes a prepared request and reads the answer with a few
// lines of code, so nearly all the CPU counted (cpu-µs/op, allocs/op) is
// the server's. "floor" is the same client against a bare server in the
// same process that reads the request, pwrites its body to a file in the
// same directory, fdatasyncs it and writes a fixed answer: the syscalls
// any durable append needs; node − floor is what the node adds (the lane,
// the wrappers, the Pico handler, the stream service, the WAL framing).
// "closed" sends the next append as soon as the answer is in; "paced"
// sends one every 5 ms, as the live-tail row does (200/s), so each finds
// the process idle and its caches cold. Run it with TMPDIR on a tmpfs
// (/dev/shm) to take the disk's fdatasync out of the figures.
func BenchmarkAppendRawNode(b *testing.B) {
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"closed", 0}, {"paced", 5 * time.Millisecond}} {
		b.Run("floor/"+c.name, func(b *testing.B) {
			addr := startRawFloor(b)
			benchAppendRaw(b, addr, c.gap)
		})
		b.Run("node/"+c.name, func(b *testing.B) {
			benchAppendRaw(b, startBenchNode(b).Addr(), c.gap)
		})
	}
}

func benchAppendRaw(b *testing.B, addr string, gap time.Duration) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	roundTrip := func(req []byte) int {
		if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		code, err := readRawResponse(br)
		if err != nil {
			b.Fatal(err)
		}
		return code
	}
	if code := roundTrip([]byte("PUT /bench/raw HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 0\r\n\r\n")); code/100 != 2 {
		b.Fatalf("create: status %d", code)
	}
	body := bytes.Repeat([]byte{'v'}, 100)
	req := fmt.Appendf(nil, "POST /bench/raw HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Unmeasured appends first: the node's start-up work (the WAL's
	// segment preallocation, the registry) is over before the CPU count.
	for i := 0; i < 2000; i++ {
		if code := roundTrip(req); code != 200 {
			b.Fatalf("append: status %d", code)
		}
	}
	lats := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if gap > 0 {
			time.Sleep(gap) // pacing, not synchronisation
		}
		t0 := time.Now()
		code := roundTrip(req)
		lats = append(lats, time.Since(t0))
		if code != 200 {
			b.Fatalf("append: status %d", code)
		}
	}
	b.StopTimer()
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// readRawResponse reads one HTTP/1.1 response with a Content-Length body
// and returns its status.
func readRawResponse(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) < 12 {
		return 0, fmt.Errorf("status line %q: %v", line, err)
	}
	code, _ := strconv.Atoi(string(line[9:12]))
	n, err := readRawHeaders(br)
	if err != nil {
		return 0, err
	}
	_, err = br.Discard(n)
	return code, err
}

// readRawHeaders reads header lines to the blank line and returns the
// Content-Length.
func readRawHeaders(br *bufio.Reader) (int, error) {
	n := 0
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(h) <= 2 {
			return n, nil
		}
		if k, v, ok := bytes.Cut(h, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
}

// startRawFloor serves benchAppendRaw's requests the bare way: read the
// head and body, pwrite the body, fdatasync, answer.
func startRawFloor(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(b.TempDir(), "floor.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close(); f.Close() })
	ack := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 52\r\n\r\n" +
		`{"offset":0,"nextOffset":1,"timestamp":0,"count":1}` + "\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				buf := make([]byte, 64<<10)
				var off int64
				for {
					if _, err := br.ReadSlice('\n'); err != nil {
						return
					}
					n, err := readRawHeaders(br)
					if err != nil || n > len(buf) {
						return
					}
					if _, err := io.ReadFull(br, buf[:n]); err != nil {
						return
					}
					if _, err := f.WriteAt(buf[:n], off); err != nil {
						return
					}
					off += int64(n)
					if err := unix.Fdatasync(int(f.Fd())); err != nil && !errors.Is(err, unix.EINVAL) {
						return
					}
					if _, err := c.Write(ack); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
