package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// The bare relay floor of a cold read (issue 31): a child process that
// does only what a node serving a cold read must do — ranged GETs of the
// stream's objects kept floorGETs ahead of the reader (floorRange bytes
// each, as parallelGETs), CRC-32C over every byte (a node must not serve
// corrupt bytes), and the bytes written to an HTTP response on a real
// loopback socket — and a bare reader in the benchmatrix process that
// reads them into one reused buffer and checks the CRC of every frame. No
// records, no index, no cache: its MB/s is what a node and a client on
// this machine can reach with zero per-record work.
//
// The response body is a sequence of frames, one per ranged GET in the
// objects' order: an 8-byte header (big-endian byte count, then the
// CRC-32C of those bytes) and the bytes. A frame of 0 bytes ends it.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// relayFrameHeader is the size of a relay frame's header.
const relayFrameHeader = 8

// relayMain is `benchmatrix relay -store URL`: it serves GET /read on a
// loopback port it prints ("listening ADDR") until it is killed.
func relayMain(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	storeURL := fs.String("store", "", "object store URL (storeurl) whose objects a GET /read relays, in key order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := storeurl.Open(context.Background(), *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	bufs := relayBuffers()
	var one sync.Mutex // one request at a time on bufs
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/read" {
			http.NotFound(w, r)
			return
		}
		one.Lock()
		defer one.Unlock()
		if err := relay(r.Context(), st, w, bufs); err != nil {
			// Buffers still held by the failed request's GETs are lost
			// to the pool: a fresh one for the next request.
			bufs = relayBuffers()
			// The status is gone with the first frame; a broken body (no
			// end frame) is what the reader sees.
			fmt.Fprintf(os.Stderr, "relay: %v\n", err)
			panic(http.ErrAbortHandler)
		}
	})}
	announce(ln.Addr().String())
	return srv.Serve(ln)
}

// relayPart is one ranged GET of the relay.
type relayPart struct {
	key     string
	off, n  int64
	buf     []byte
	err     error
	fetched chan struct{}
}

// relayBuffers are a relay's floorGETs buffers of floorRange bytes, kept
// for the process's life as a node keeps its read buffers: made anew for
// each request, their 64 MiB would be page-faulted and zeroed on every
// pass, work a running node does not do per read.
func relayBuffers() chan []byte {
	bufs := make(chan []byte, floorGETs)
	for range floorGETs {
		bufs <- make([]byte, floorRange)
	}
	return bufs
}

// relay writes every object of st, in key order, to w as frames, keeping
// floorGETs ranged GETs of floorRange bytes in flight ahead of the write:
// a GET starts when the write of the part floorGETs before it has given
// its buffer back to bufs (relayBuffers; one request at a time).
func relay(ctx context.Context, st objstore.Store, w io.Writer, bufs chan []byte) error {
	var parts []*relayPart
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return err
		}
		for off := int64(0); off < a.Size; off += floorRange {
			parts = append(parts, &relayPart{key: a.Key, off: off, n: min(floorRange, a.Size-off), fetched: make(chan struct{})})
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for _, p := range parts {
			select {
			case p.buf = <-bufs:
			case <-ctx.Done():
				return
			}
			go func() {
				k, err := st.ReadAt(ctx, p.key, p.buf[:p.n], p.off)
				if err == io.EOF && int64(k) == p.n {
					err = nil
				}
				p.buf, p.err = p.buf[:k], err
				close(p.fetched)
			}()
		}
	}()
	var hdr [relayFrameHeader]byte
	for _, p := range parts {
		select {
		case <-p.fetched:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err != nil {
			return fmt.Errorf("GET %s [%d, +%d): %w", p.key, p.off, p.n, p.err)
		}
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(p.buf)))
		binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(p.buf, castagnoli))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(p.buf); err != nil {
			return err
		}
		bufs <- p.buf[:cap(p.buf)]
	}
	clear(hdr[:])
	_, err := w.Write(hdr[:])
	return err
}

// readRelay reads a relay's frames from r into one reused buffer of
// chunk bytes, checks each frame's CRC-32C, and returns the bytes read;
// it fails on a CRC mismatch, a frame larger than floorRange, or a body
// that ends before the end frame.
func readRelay(r io.Reader, chunk int) (int64, error) {
	buf := make([]byte, chunk)
	var hdr [relayFrameHeader]byte
	var total int64
	for frame := 0; ; frame++ {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return total, fmt.Errorf("frame %d header: %w", frame, noEOF(err))
		}
		n, want := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if n == 0 {
			return total, nil
		}
		if n > floorRange {
			return total, fmt.Errorf("frame %d: %d bytes, more than the relay's %d", frame, n, floorRange)
		}
		var crc uint32
		for left := int(n); left > 0; {
			k, err := io.ReadFull(r, buf[:min(left, len(buf))])
			crc = crc32.Update(crc, castagnoli, buf[:k])
			left -= k
			total += int64(k)
			if err != nil {
				return total, fmt.Errorf("frame %d body: %w", frame, noEOF(err))
			}
		}
		if crc != want {
			return total, fmt.Errorf("frame %d: CRC-32C %08x, header says %08x", frame, crc, want)
		}
	}
}

// noEOF turns a clean EOF (a body cut before its end frame) into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// relayResult is one bare relay read.
type relayResult struct {
	mbs                 float64 // relayed bytes, MB/s
	bytes               int64
	relayCPU, readerCPU float64 // seconds, the relay process and this one
	firstMBs            float64 // the same, on the relay process's first pass
}

// relayFloor starts a relay child on storeURL and reads everything
// through it twice, each pass timed from the request to the end frame;
// the second pass is the floor: a node that serves a cold read is a
// running process with its connections to the store open and its
// buffers in memory (PicoMQ's node is restarted only to empty its
// cache), which the first pass pays for. It fails unless want bytes
// arrive intact on both.
func relayFloor(ctx context.Context, storeURL string, want int64) (relayResult, error) {
	p, addr, err := startChild("relay", "relay", "-store", storeURL)
	if err != nil {
		return relayResult{}, err
	}
	defer p.stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer c.CloseIdleConnections()
	var res relayResult
	for pass := range 2 {
		r, err := relayPass(ctx, c, addr, p.pid)
		if err != nil {
			return res, fmt.Errorf("relay pass %d: %w\n%s", pass+1, err, p.tail())
		}
		if r.bytes != want {
			return res, fmt.Errorf("relay pass %d: %d bytes, want %d", pass+1, r.bytes, want)
		}
		if pass == 0 {
			res.firstMBs = r.mbs
		} else {
			r.firstMBs = res.firstMBs
			res = r
		}
	}
	return res, nil
}

// relayPass is one timed GET /read of the relay at addr (process pid).
func relayPass(ctx context.Context, c *http.Client, addr string, pid int) (relayResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/read", nil)
	if err != nil {
		return relayResult{}, err
	}
	cpu0, rcpu0 := testproc.CPUSeconds(pid), testproc.CPUSeconds(os.Getpid())
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return relayResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return relayResult{}, fmt.Errorf("%s", resp.Status)
	}
	got, err := readRelay(resp.Body, 256<<10)
	el := time.Since(t0)
	return relayResult{mbs: float64(got) / 1e6 / el.Seconds(), bytes: got,
		relayCPU: testproc.CPUSeconds(pid) - cpu0, readerCPU: testproc.CPUSeconds(os.Getpid()) - rcpu0}, err
}
