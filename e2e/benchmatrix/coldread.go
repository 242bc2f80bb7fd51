package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/tiering/objstore"
)

// Cold-read rows beyond the first (object.go): the same stream read cold
// over Kafka, through a proxy adding latency to every object-store
// request, and many streams read cold at once.
const (
	getLatency   = 100 * time.Millisecond // added per request by the latency proxy
	floorRange   = 4 << 20                // ranged GET size of the parallel-GET floor
	floorGETs    = 16                     // GETs in flight for the parallel-GET floor
	manyReaders  = 100                    // concurrent cold readers, one stream each
	manyMiB      = 1                      // MiB per stream for manyReaders
	manyCacheMiB = 64                     // --cache-bytes of the many-readers node
	manyAheadMiB = 32                     // --read-ahead-bytes of the many-readers node
)

// coldRead reads stream s of c from the start and returns MB/s of
// record bytes; it fails unless want bytes arrive.
func coldRead(ctx context.Context, c picomq.Client, name string, want int64) (float64, error) {
	t0 := time.Now()
	it := c.Stream(name).Records(c.Beginning(), picomq.RecordsOptions{})
	var got int64
	for it.Next(ctx) {
		got += int64(len(it.Record().Body))
	}
	el := time.Since(t0)
	if err := it.Err(); err != nil || got != want {
		return 0, fmt.Errorf("cold read of %s: %d of %d bytes: %v", name, got, want, err)
	}
	return float64(got) / 1e6 / el.Seconds(), nil
}

// sequentialGETs reads every object under the store's prefix whole, one
// at a time, and returns MB/s: a reader that waits for one object at a
// time.
func sequentialGETs(ctx context.Context, st objstore.Store) (float64, error) {
	t0 := time.Now()
	var got int64
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return 0, err
		}
		buf := make([]byte, a.Size)
		k, err := st.ReadAt(ctx, a.Key, buf, 0)
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", a.Key, err)
		}
		got += int64(k)
	}
	return float64(got) / 1e6 / time.Since(t0).Seconds(), nil
}

// parallelGETs reads every object under the store's prefix as ranged GETs
// of floorRange bytes, floorGETs at a time, and returns MB/s: what the
// store delivers to a reader that keeps many GETs in flight.
func parallelGETs(ctx context.Context, st objstore.Store) (float64, error) {
	return parallelGETsWith(ctx, st, nil)
}

// parallelGETsWith is parallelGETs into the floorGETs buffers of
// floorRange bytes in bufs (relayBuffers), or into fresh ones when bufs
// is nil.
func parallelGETsWith(ctx context.Context, st objstore.Store, bufs chan []byte) (float64, error) {
	type part struct {
		key string
		off int64
		n   int64
	}
	var parts []part
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return 0, err
		}
		for off := int64(0); off < a.Size; off += floorRange {
			parts = append(parts, part{a.Key, off, min(floorRange, a.Size-off)})
		}
	}
	t0 := time.Now()
	var (
		next, got atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		firstErr  error
	)
	for range floorGETs {
		wg.Go(func() {
			var buf []byte
			if bufs != nil {
				buf = <-bufs
				defer func() { bufs <- buf }()
			} else {
				buf = make([]byte, floorRange)
			}
			for {
				i := next.Add(1) - 1
				if i >= int64(len(parts)) {
					return
				}
				p := parts[i]
				k, err := st.ReadAt(ctx, p.key, buf[:p.n], p.off)
				if err != nil && err != io.EOF {
					mu.Lock()
					firstErr = fmt.Errorf("GET %s [%d, +%d): %w", p.key, p.off, p.n, err)
					mu.Unlock()
					return
				}
				got.Add(int64(k))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(got.Load()) / 1e6 / time.Since(t0).Seconds(), nil
}

// kafkaColdRead consumes records 1 KiB records of topic from the start
// with one franz-go consumer and returns MB/s of record values.
func kafkaColdRead(ctx context.Context, addr, topic string, records int64) (float64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	var got, bytes int64
	for got < records && cctx.Err() == nil {
		fs := cl.PollFetches(cctx)
		if err := fs.Err0(); err != nil && cctx.Err() == nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) { got++; bytes += int64(len(r.Value)) })
	}
	if got < records {
		return 0, fmt.Errorf("consumed %d of %d records", got, records)
	}
	return float64(bytes) / 1e6 / time.Since(t0).Seconds(), nil
}

// latencyProxy forwards HTTP requests to an object store after a fixed
// delay each, standing in for S3 across a network on loopback. It keeps
// the Host header, so the S3 signatures made for its address verify.
type latencyProxy struct {
	srv   *http.Server
	addr  string
	delay time.Duration
	rp    *httputil.ReverseProxy
	// With profiling asked for (profileDirEnv), every request is logged
	// (start since the proxy started, method, path, Range, duration) to
	// show how far ahead of the reader the node's GETs run.
	t0   time.Time
	mu   sync.Mutex
	reqs []string
}

func startLatencyProxy(target string, delay time.Duration) (*latencyProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &latencyProxy{addr: ln.Addr().String(), delay: delay, rp: httputil.NewSingleHostReverseProxy(u), t0: time.Now()}
	p.rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	p.rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *latencyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	start := time.Now()
	p.rp.ServeHTTP(w, r)
	if os.Getenv(profileDirEnv) != "" {
		p.mu.Lock()
		p.reqs = append(p.reqs, fmt.Sprintf("%8.1fms %s %s %s %.1fms", float64(start.Sub(p.t0).Microseconds())/1000-float64(p.delay.Milliseconds()),
			r.Method, r.URL.Path, r.Header.Get("Range"), float64(time.Since(start).Microseconds())/1000+float64(p.delay.Milliseconds())))
		p.mu.Unlock()
	}
}

// writeLog writes the requests logged so far to file name in the profile
// directory and forgets them.
func (p *latencyProxy) writeLog(name string) {
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(p.reqs, "\n")+"\n"), 0o644)
	p.reqs = nil
}

func (p *latencyProxy) endpoint() string { return "http://" + p.addr }

func (p *latencyProxy) close() { _ = p.srv.Close() }

// peakRSS samples a process's RSS every 20 ms until stop is called, which
// returns the largest sample in bytes.
func peakRSS(pid int) (stop func() float64) {
	var peak float64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			peak = max(peak, testproc.RSSBytes(pid))
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-finished
		return peak
	}
}
