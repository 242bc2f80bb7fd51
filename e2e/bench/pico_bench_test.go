// Package bench measures the Pico HTTP protocol end to end: a real
// `picomq serve` process on loopback, driven by concurrent HTTP clients,
// next to the write-ahead log alone measured in the same run on the same
// disk, so the ratio says how much of the storage ceiling the protocol
// layer keeps. Run with `make bench-micro` (or go test -run '^$' -bench .
// -benchtime 1x ./e2e/bench/). PICOMQ_BENCH_DIR picks the disk,
// PICOMQ_BENCH_SECONDS the duration of each measurement (default 2).
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
	"github.com/PicoMQ/picomq/wal"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// picomqBinary builds the binary once per run (only when a benchmark
// needs it, so `go test ./...` does not pay for it), or uses
// $PICOMQ_TEST_BIN: two builds can then be compared in alternating runs.
func picomqBinary(b *testing.B) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "picomq-bench-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = testproc.PicomqBinary(dir)
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// benchDir is where benchmarks put their files (testproc.BenchDir), the
// WAL-alone baseline included.
func benchDir(b *testing.B) string { return testproc.BenchDir(b, "picobench-") }

func measureFor() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("PICOMQ_BENCH_SECONDS"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 2 * time.Second
}

// node is a running picomq process.
type node struct {
	*testproc.Proc
	url string
	pid int
}

func startNode(b *testing.B, extra ...string) *node {
	return startNodeIn(b, benchDir(b), extra...)
}

// startNodeIn starts picomq serve on dataDir and waits until it is ready;
// the process is stopped at the end of the benchmark if stop was not called.
func startNodeIn(b *testing.B, dataDir string, extra ...string) *node {
	b.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	args := append([]string{"serve", "--data-dir", dataDir, "--http-addr", addr, "--kafka-addr", "off",
		"--node-id", "bench", "--log-level", "warn"}, extra...)
	p, err := testproc.Start(exec.Command(picomqBinary(b), args...), nil)
	if err != nil {
		b.Fatal(err)
	}
	n := &node{Proc: p, url: "http://" + addr, pid: p.Cmd.Process.Pid}
	b.Cleanup(func() { n.stop(b) })
	if err := testproc.WaitReady(n.url+"/readyz", n.Exited, 120*time.Second); err != nil {
		b.Fatalf("picomq: %v\n%s", err, n.Logs.String())
	}
	return n
}

// stop sends SIGTERM and waits for the process to exit (kill -9 after 60 s).
func (n *node) stop(b *testing.B) {
	if err := n.Stop(60 * time.Second); err != nil {
		b.Logf("picomq %d: %v; killed it", n.pid, err)
	}
}

// result is one measured configuration.
type result struct {
	requests, records, bytes int64
	elapsed                  time.Duration
	lat                      []time.Duration
	// syncs and syncSeconds: the WAL's fdatasyncs during a WAL-alone run.
	syncs       uint64
	syncSeconds float64
}

func (r result) recordsPerSec() float64 { return float64(r.records) / r.elapsed.Seconds() }
func (r result) mbPerSec() float64      { return float64(r.bytes) / r.elapsed.Seconds() / 1e6 }
func (r result) pct(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	return r.lat[int(q*float64(len(r.lat)-1))]
}

// drive runs op from c workers for d and collects every latency.
func drive(c int, d time.Duration, op func(w int) (records, bytes int64, err error)) (result, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		res      result
		firstErr atomic.Pointer[error]
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var lat []time.Duration
			var reqs, recs, bytes int64
			for time.Now().Before(stop) {
				t0 := time.Now()
				n, nb, err := op(w)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat = append(lat, time.Since(t0))
				reqs++
				recs += n
				bytes += nb
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.requests += reqs
			res.records += recs
			res.bytes += bytes
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if e := firstErr.Load(); e != nil {
		return res, *e
	}
	return res, nil
}

// batchRecords is the records per batch append (and per WAL entry of the
// WAL-only ceiling of a batch configuration).
const batchRecords = 100

// walCeiling measures the WAL alone: c appenders writing the entries the
// stream service would write for the same records (a RecordBatch of n
// records of size bytes, plus the service's entry header), acknowledged
// after fdatasync exactly like an HTTP append.
func walCeiling(b *testing.B, c, n, size int, d time.Duration) result {
	w, _, err := wal.Open(wal.Options{Dir: benchDir(b), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i].Value = bytes.Repeat([]byte{'v'}, size)
	}
	entry := append(make([]byte, 10), record.AppendBatch(nil, record.BatchOptions{ProducerID: -1, Timestamp: time.Now().UnixMilli()}, recs)...)
	ctx := context.Background()
	st0 := w.Stats()
	res, err := drive(c, d, func(int) (int64, int64, error) {
		_, err := w.Append(ctx, entry)
		return int64(n), int64(n * size), err
	})
	if err != nil {
		b.Fatal(err)
	}
	st := w.Stats()
	res.syncs, res.syncSeconds = st.Syncs-st0.Syncs, (st.SyncTime - st0.SyncTime).Seconds()
	return res
}

// BenchmarkPicoAppend prints HTTP append throughput and latency for 1, 16
// and 128 concurrent clients, 100 B and 1 KiB records, single-body and
// binary-batch appends, each next to the WAL-only ceiling of the same
// configuration. MB/s counts record value bytes.
func BenchmarkPicoAppend(b *testing.B) {
	d := measureFor()
	n := startNode(b)
	fmt.Printf("\nPico HTTP append vs WAL-only ceiling (best of 2 alternating rounds of %s, batch = %d records, MB/s of record values)\n", d, batchRecords)
	fmt.Printf("%-7s %-6s %5s | %12s %9s %9s %9s | %12s %9s | %6s\n",
		"shape", "record", "conns", "HTTP rec/s", "MB/s", "p50", "p99", "WAL rec/s", "MB/s", "HTTP/WAL")
	for _, shape := range []string{"single", "batch"} {
		for _, size := range []int{100, 1024} {
			for _, c := range []int{1, 16, 128} {
				per := 1
				if shape == "batch" {
					per = batchRecords
				}
				name := fmt.Sprintf("/bench/%s-%d-%d", shape, size, c)
				mustCreate(b, n.url+name)
				body, ct := appendBody(shape, per, size)
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
				httpOnce := func() result {
					res, err := drive(c, d, appendOp(client, n.url+name, body, ct, int64(per), int64(size)))
					if err != nil {
						b.Fatal(err)
					}
					return res
				}
				// Best of two alternating rounds each: the machine may be
				// shared, and alternating keeps a burst of outside load
				// from landing on one side only.
				var httpRes, walRes result
				for round := 0; round < 2; round++ {
					if r := httpOnce(); r.records > httpRes.records {
						httpRes = r
					}
					if r := walCeiling(b, c, per, size, d); r.records > walRes.records {
						walRes = r
					}
				}
				client.CloseIdleConnections()
				ratio := httpRes.mbPerSec() / walRes.mbPerSec()
				fmt.Printf("%-7s %6s %5d | %12.0f %9.1f %9s %9s | %12.0f %9.1f | %5.0f%%\n",
					shape, sizeName(size), c, httpRes.recordsPerSec(), httpRes.mbPerSec(),
					httpRes.pct(0.5).Round(time.Microsecond), httpRes.pct(0.99).Round(time.Microsecond),
					walRes.recordsPerSec(), walRes.mbPerSec(), 100*ratio)
				if shape == "batch" && size == 1024 {
					b.ReportMetric(100*ratio, fmt.Sprintf("pct-of-wal-batch1KiB-c%d", c))
				}
			}
		}
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

func appendBody(shape string, per, size int) ([]byte, string) {
	val := bytes.Repeat([]byte{'v'}, size)
	if shape == "single" {
		return val, "application/octet-stream"
	}
	recs := make([]codec.Record, per)
	for i := range recs {
		recs[i].Value = val
	}
	return codec.Encode(recs), wire.MediaBatch
}

// mustCreate creates the binary stream at url.
func mustCreate(b *testing.B, url string) {
	b.Helper()
	r, err := http.DefaultClient.Do(mustReq("PUT", url, nil, "Content-Type", "application/octet-stream"))
	if err != nil || r.StatusCode != 201 {
		b.Fatalf("create %s: %v %v", url, r, err)
	}
	r.Body.Close()
}

// appendOp is drive's op for appending body (records records of size
// bytes each) to the stream at url.
func appendOp(c *http.Client, url string, body []byte, ct string, records, size int64) func(int) (int64, int64, error) {
	return func(int) (int64, int64, error) {
		resp, err := c.Do(mustReq("POST", url, body, "Content-Type", ct))
		if err != nil {
			return 0, 0, err
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, 0, fmt.Errorf("append: status %d: %s", resp.StatusCode, msg)
		}
		return records, records * size, nil
	}
}

func mustReq(method, url string, body []byte, hdrs ...string) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		panic(err)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Set(hdrs[i], hdrs[i+1])
	}
	return req
}

// BenchmarkPicoSSEFanout: one stream, 1,000 live SSE readers, a writer
// appending one record at a fixed rate. Reports the p99 of append-to-
// delivery latency over all deliveries (the record carries its send time)
// and the server's CPU-seconds per million delivered records (from /proc,
// so the readers' own CPU is not counted).
func BenchmarkPicoSSEFanout(b *testing.B) {
	const readers = 1000
	rate := testproc.EnvCount("PICOMQ_BENCH_SSE_RATE", 50) // appends per second
	d := 2 * measureFor()
	n := startNode(b)
	name := "/bench/fanout"
	if r, err := http.DefaultClient.Do(mustReq("PUT", n.url+name, nil, "Content-Type", "text/plain")); err != nil || r.StatusCode != 201 {
		b.Fatalf("create: %v %v", r, err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: readers, MaxConnsPerHost: 0, DisableCompression: true}
	client := &http.Client{Transport: transport}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		lat       []time.Duration
		delivered atomic.Int64
		ready     sync.WaitGroup
	)
	ready.Add(readers)
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", n.url+name+"?offset=0&live=sse", nil)
			resp, err := client.Do(req)
			if err != nil || resp.StatusCode != 200 {
				ready.Done()
				b.Errorf("SSE connect: %v", err)
				return
			}
			defer resp.Body.Close()
			var mine []time.Duration
			buf := make([]byte, 64<<10)
			var pending []byte
			first := true
			for {
				k, err := resp.Body.Read(buf)
				if first && k > 0 {
					first = false
					ready.Done()
				}
				now := time.Now().UnixNano()
				pending = append(pending, buf[:k]...)
				// Each record value is "t=<unix nanos>"; count them
				// without decoding JSON so the client stays cheap.
				for {
					i := bytes.Index(pending, []byte(`"value":"t=`))
					if i < 0 {
						break
					}
					rest := pending[i+len(`"value":"t=`):]
					j := bytes.IndexByte(rest, '"')
					if j < 0 {
						break
					}
					if sent, err := strconv.ParseInt(string(rest[:j]), 10, 64); err == nil {
						mine = append(mine, time.Duration(now-sent))
					}
					pending = rest[j:]
				}
				if len(pending) > 1<<16 {
					pending = pending[len(pending)-64:]
				}
				if err != nil {
					break
				}
			}
			delivered.Add(int64(len(mine)))
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	ready.Wait()
	cpu0 := testproc.CPUSeconds(n.pid)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	stop := time.After(d)
	sent := 0
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tick.C:
			body := []byte("t=" + strconv.FormatInt(time.Now().UnixNano(), 10))
			resp, err := http.DefaultClient.Do(mustReq("POST", n.url+name, body, "Content-Type", "text/plain"))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			sent++
		}
	}
	tick.Stop()
	time.Sleep(500 * time.Millisecond) // let the last deliveries land
	cpu1 := testproc.CPUSeconds(n.pid)
	cancel()
	wg.Wait()
	res := result{lat: lat}
	total := delivered.Load()
	fmt.Printf("\nPico SSE fan-out: 1 stream, %d readers, %d appends at %d/s over %s\n", readers, sent, rate, d)
	fmt.Printf("delivered %d of %d records; append-to-delivery p50 %s p99 %s max %s; server CPU %.2fs = %.2f CPU-s per million delivered\n",
		total, int64(sent)*readers, res.pct(0.5).Round(time.Microsecond), res.pct(0.99).Round(time.Microsecond),
		res.pct(1).Round(time.Microsecond), cpu1-cpu0, (cpu1-cpu0)/float64(total)*1e6)
	b.ReportMetric(float64(res.pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric((cpu1-cpu0)/float64(total)*1e6, "cpu-s/M-delivered")
}
