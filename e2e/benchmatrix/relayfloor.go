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
	"net/url"
	"os"
	"slices"
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
	touched := fs.Bool("touched", false, "touch the read buffers before listening, as a node with --cache-pretouch has its read memory")
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
	bufs := relayBuffers(*touched)
	var one sync.Mutex // one request at a time on bufs
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/read" {
			http.NotFound(w, r)
			return
		}
		one.Lock()
		defer one.Unlock()
		if err := relay(r.Context(), st, w, bufs, r.URL.Query()["key"]); err != nil {
			// Buffers still held by the failed request's GETs are lost
			// to the pool: a fresh one for the next request.
			bufs = relayBuffers(*touched)
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
// pass, work a running node does not do per read. touched: each page is
// written once now, so that the first pass too reads into memory the
// process already has (a fresh process otherwise pays those faults
// during its first pass: 2-3x slower on the development VM).
func relayBuffers(touched bool) chan []byte {
	bufs := make(chan []byte, floorGETs)
	for range floorGETs {
		b := make([]byte, floorRange)
		if touched {
			touchPages(b)
		}
		bufs <- b
	}
	return bufs
}

// touchPages writes one byte of every page of b (the bytes are zero and
// stay zero: only the kernel's side of the memory changes).
func touchPages(b []byte) {
	page := os.Getpagesize()
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
}

// relay writes every object of st, in key order, to w as frames, keeping
// floorGETs ranged GETs of floorRange bytes in flight ahead of the write:
// a GET starts when the write of the part floorGETs before it has given
// its buffer back to bufs (relayBuffers; one request at a time). With
// keys, only those objects are relayed (the running cold-read row's
// stream among others).
func relay(ctx context.Context, st objstore.Store, w io.Writer, bufs chan []byte, keys []string) error {
	var parts []*relayPart
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return err
		}
		if keys != nil && !slices.Contains(keys, a.Key) {
			continue
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
	seconds             float64 // from the request to the end frame
	bytes               int64
	relayCPU, readerCPU float64 // seconds, the relay process and this one
}

// relayChild is a running `benchmatrix relay` and its reader's client.
type relayChild struct {
	p    *proc
	addr string
	c    *http.Client
}

// startRelay starts a relay child on storeURL.
func startRelay(storeURL string, flags ...string) (*relayChild, error) {
	p, addr, err := startChild("relay", append([]string{"relay", "-store", storeURL}, flags...)...)
	if err != nil {
		return nil, err
	}
	return &relayChild{p: p, addr: addr, c: &http.Client{Transport: &http.Transport{DisableCompression: true}}}, nil
}

func (r *relayChild) stop() {
	r.c.CloseIdleConnections()
	r.p.stop()
}

// pass reads everything through the relay once, timed from the request
// to the end frame, and fails unless want bytes arrive intact. A relay's
// first pass pays for what a running node has already done (connections
// to the store, buffers in memory; PicoMQ's node is restarted only to
// empty its cache): the floor is a later pass.
func (r *relayChild) pass(ctx context.Context, want int64) (relayResult, error) {
	return r.passKeys(ctx, want, nil)
}

// passKeys is pass over the objects keys only (all of them when nil).
func (r *relayChild) passKeys(ctx context.Context, want int64, keys []string) (relayResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	q := url.Values{"key": keys}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/read?"+q.Encode(), nil)
	if err != nil {
		return relayResult{}, err
	}
	cpu0, rcpu0 := testproc.CPUSeconds(r.p.pid), testproc.CPUSeconds(os.Getpid())
	t0 := time.Now()
	resp, err := r.c.Do(req)
	if err != nil {
		return relayResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return relayResult{}, fmt.Errorf("relay: %s", resp.Status)
	}
	got, err := readRelay(resp.Body, 256<<10)
	el := time.Since(t0)
	res := relayResult{mbs: float64(got) / 1e6 / el.Seconds(), seconds: el.Seconds(), bytes: got,
		relayCPU: testproc.CPUSeconds(r.p.pid) - cpu0, readerCPU: testproc.CPUSeconds(os.Getpid()) - rcpu0}
	if err != nil {
		return res, fmt.Errorf("relay read: %w\n%s", err, r.p.tail())
	}
	if got != want {
		return res, fmt.Errorf("relay read %d bytes, want %d", got, want)
	}
	return res, nil
}
