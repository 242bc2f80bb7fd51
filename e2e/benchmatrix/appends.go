package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/hdr"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

// loadResult is what picomq bench --json and natsload print (the fields
// the matrix uses).
type loadResult struct {
	Appends       int64               `json:"appends"`
	Records       int64               `json:"records"`
	Bytes         int64               `json:"bytes"`
	Errors        int64               `json:"errors"`
	FirstError    string              `json:"firstError"`
	RecordsPerSec float64             `json:"recordsPerSec"`
	MBPerSec      float64             `json:"mbPerSec"`
	Seconds       float64             `json:"durationSeconds"`
	Lat           benchreport.Latency `json:"ackLatencyMs"`
}

// jsonCommand runs a load command that prints one JSON object.
func jsonCommand(ctx context.Context, bin string, args ...string) (loadResult, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var r loadResult
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		return r, fmt.Errorf("%s %v: %v (%v)\n%s", filepath.Base(bin), args, err, jerr, lastBytes(errb.String(), 1500))
	}
	if err != nil {
		return r, fmt.Errorf("%s %v: %v\n%s", filepath.Base(bin), args, err, lastBytes(errb.String(), 1500))
	}
	if r.Errors > 0 {
		logf("  %s: %d errors (first: %s)", filepath.Base(bin), r.Errors, r.FirstError)
	}
	return r, nil
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// picoBench runs picomq bench against a node: c producers, one stream
// each, single-record appends of size bytes, closed loop.
func (m *matrix) picoBench(ctx context.Context, url, proto, prefix string, c, size int, extra ...string) (loadResult, error) {
	return jsonCommand(ctx, m.cfg.picomq, append([]string{"bench", "--json", "--server", url, "--protocol", proto,
		"--producers", fmt.Sprint(c), "--streams", fmt.Sprint(c), "--record-size", fmt.Sprint(size),
		"--duration", m.cfg.secs.String(), "--warmup", m.cfg.warmup.String(), "--prefix", prefix}, extra...)...)
}

// closedLoop runs op from c goroutines back to back for warmup+d and
// returns the rate and latency of the measured part.
func closedLoop(ctx context.Context, c int, warmup, d time.Duration, op func(w int) error) (float64, *benchreport.Latency, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		h        hdr.Histogram
		n        atomic.Int64
		firstErr atomic.Value
	)
	begin := time.Now()
	from, until := begin.Add(warmup), begin.Add(warmup+d)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine hdr.Histogram
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(until) {
					break
				}
				if err := op(w); err == errDone {
					break
				} else if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if t0.After(from) {
					mine.Record(time.Since(t0).Nanoseconds())
					n.Add(1)
				}
			}
			mu.Lock()
			h.Merge(&mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, nil, err
	}
	return float64(n.Load()) / d.Seconds(), latencyOf(&h), ctx.Err()
}

func latencyOf(h *hdr.Histogram) *benchreport.Latency {
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	return &benchreport.Latency{P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6}
}

// walEntry is what the stream service writes to the WAL for n records of
// size bytes: a RecordBatch plus its entry header.
func walEntry(n, size int) []byte {
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i].Value = bytes.Repeat([]byte{'v'}, size)
	}
	return append(make([]byte, 10), record.AppendBatch(nil, record.BatchOptions{ProducerID: -1, Timestamp: time.Now().UnixMilli()}, recs)...)
}

// walAlone measures the WAL by itself: c appenders of entry, each
// acknowledged after fdatasync, exactly what an append waits for.
func (m *matrix) walAlone(ctx context.Context, c int, entry []byte) (float64, *benchreport.Latency, error) {
	dir, err := os.MkdirTemp(m.cfg.work, "wal-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	w, _, err := wal.Open(wal.Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, nil, err
	}
	defer w.Close()
	return closedLoop(ctx, c, m.cfg.warmup, m.cfg.secs, func(int) error {
		_, err := w.Append(ctx, entry)
		return err
	})
}

// fsyncFloor measures the disk: one writer appending size bytes to a file
// and fdatasyncing after each write, the cost any durable append pays.
func (m *matrix) fsyncFloor(ctx context.Context, size int) (float64, *benchreport.Latency, error) {
	f, err := os.CreateTemp(m.cfg.work, "floor-")
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := bytes.Repeat([]byte{'f'}, size)
	return closedLoop(ctx, 1, m.cfg.warmup, m.cfg.secs, func(int) error {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		return unix.Fdatasync(int(f.Fd()))
	})
}

// walRows: the WAL with one writer and with 64 (group commit), next to
// the disk's floor measured just before, on the same disk.
func (m *matrix) walRows(ctx context.Context, run int) error {
	floor := "raw append + fdatasync, 1 writer (disk floor)"
	one := m.row(benchreport.Row{ID: "wal-c1", What: "WAL append, 1 writer, 100 B", Unit: "appends/s", Peer: floor})
	many := m.row(benchreport.Row{ID: "wal-c64", What: "WAL group commit, 64 writers, 100 B", Unit: "appends/s", Peer: floor})
	fv, fl, err := m.fsyncFloor(ctx, 100)
	if err != nil {
		return fmt.Errorf("fsync floor: %w", err)
	}
	entry := walEntry(1, 100)
	for _, x := range []struct {
		id string
		c  int
	}{{one, 1}, {many, 64}} {
		v, l, err := m.walAlone(ctx, x.c, entry)
		if err != nil {
			return fmt.Errorf("WAL %d writers: %w", x.c, err)
		}
		m.res.Add(x.id, run, benchreport.SidePico, v, l)
		m.res.Add(x.id, run, benchreport.SidePeer, fv, fl)
		logf("  %s: WAL %.0f/s, floor %.0f/s", x.id, v, fv)
	}
	return nil
}

// httpRows: single-record appends over Pico HTTP at 1 and 64 clients,
// 100 B and 1 KiB, one stream per client, next to NATS JetStream
// (sync_interval: always) with the same load; then the server CPU per
// append and RSS of both.
func (m *matrix) httpRows(ctx context.Context, run int) error {
	n, err := m.startNode("pico")
	if err != nil {
		return err
	}
	defer n.stop()
	nats, natsURL, err := m.startNATS()
	if err != nil {
		return err
	}
	defer nats.stop()
	const peer = "NATS JetStream, sync_interval: always"
	const cpuRow, rssRow = "cpu-append", "rss-after-appends"
	for _, size := range []int{100, 1024} {
		for _, c := range []int{1, 64} {
			id := m.row(benchreport.Row{ID: fmt.Sprintf("http-c%d-s%d", c, size),
				What: fmt.Sprintf("single-record HTTP appends, %s, %s", clients(c), sizeName(size)),
				Unit: "appends/s", Peer: peer, Group: "single-record appends, " + sizeName(size), X: c})
			cpu0 := testproc.CPUSeconds(n.pid)
			r, err := m.picoBench(ctx, n.url, "pico", fmt.Sprintf("/mb/r%d/c%d-s%d", run, c, size), c, size)
			cpu1 := testproc.CPUSeconds(n.pid)
			if err != nil {
				m.fail(id+" PicoMQ", err)
			} else {
				m.res.Add(id, run, benchreport.SidePico, r.RecordsPerSec, &r.Lat)
				if c == 64 && size == 100 {
					m.res.Add(cpuRow, run, benchreport.SidePico, cpuPerOp(cpu1-cpu0, r, m.cfg), nil)
				}
			}
			if size == 100 {
				m.ceilingRow(ctx, run, c, r, err)
			}
			if nats == nil {
				continue
			}
			cpu0 = testproc.CPUSeconds(nats.pid)
			q, err := jsonCommand(ctx, m.cfg.natsload, "pub", "-url", natsURL, "-subject", fmt.Sprintf("bench.r%d.c%d.s%d", run, c, size),
				"-c", fmt.Sprint(c), "-size", fmt.Sprint(size), "-d", m.cfg.secs.String(), "-warmup", m.cfg.warmup.String())
			cpu1 = testproc.CPUSeconds(nats.pid)
			if err != nil {
				m.fail(id+" JetStream", err)
				continue
			}
			m.res.Add(id, run, benchreport.SidePeer, q.RecordsPerSec, &q.Lat)
			if c == 64 && size == 100 {
				m.res.Add(cpuRow, run, benchreport.SidePeer, cpuPerOp(cpu1-cpu0, q, m.cfg), nil)
			}
			logf("  %s: PicoMQ %.0f/s (p99 %.2f ms), JetStream %.0f/s (p99 %.2f ms)", id, r.RecordsPerSec, r.Lat.P99, q.RecordsPerSec, q.Lat.P99)
		}
	}
	m.row(benchreport.Row{ID: cpuRow, What: "server CPU per single-record append, 64 clients, 100 B", Unit: "µs",
		Peer: peer, LowerBetter: true, Note: "warm-up appends counted at the measured rate"})
	m.row(benchreport.Row{ID: rssRow, What: "server RSS after the append points", Unit: "MiB", Peer: peer, LowerBetter: true})
	m.res.Add(rssRow, run, benchreport.SidePico, testproc.RSSBytes(n.pid)/(1<<20), nil)
	if nats != nil {
		m.res.Add(rssRow, run, benchreport.SidePeer, testproc.RSSBytes(nats.pid)/(1<<20), nil)
	}
	return nil
}

// cpuPerOp is server CPU microseconds per append over a load command's
// whole run: its warm-up appends are estimated at the measured rate.
func cpuPerOp(cpuSecs float64, r loadResult, c config) float64 {
	ops := r.RecordsPerSec * (c.secs + c.warmup).Seconds()
	if ops == 0 {
		return 0
	}
	return cpuSecs / ops * 1e6
}

// dsRows: Durable Streams appends (one POST of 100 B each, one stream per
// client) at 1 and 64 clients on byte streams (text/plain), PicoMQ next to
// the Node reference server, both file-backed and fsyncing before the ack;
// then the same next to the Caddy server when PICOMQ_BENCH_CADDY names one
// (dsCaddyRows); then live fan-out on a JSON stream (dsFanout). JSON-stream appends are
// not a row: they cost the matrix 15 s a run and measured within the
// spread of the byte-stream row.
func (m *matrix) dsRows(ctx context.Context, run int) error {
	n, err := m.startNode("pico-ds", "--protocol", "durable-streams")
	if err != nil {
		return err
	}
	defer n.stop()
	ref, refURL, err := m.startReference()
	if err != nil {
		return err
	}
	defer ref.stop()
	const peer = "Durable Streams Node reference server (file store)"
	for _, p := range []struct {
		c      int
		ct, id string
	}{{1, "text/plain", "ds-c1"}, {64, "text/plain", "ds-c64"}} {
		what := fmt.Sprintf("Durable Streams appends, %s, 100 B, %s stream", clients(p.c), p.ct)
		row := benchreport.Row{ID: p.id, What: what, Unit: "appends/s", Peer: peer}
		if p.ct == "text/plain" {
			row.Group, row.X = "Durable Streams appends, 100 B, text/plain", p.c
		}
		id := m.row(row)
		prefix := fmt.Sprintf("/mb/r%d/%s", run, p.id)
		args := []string{"--content-type", p.ct}
		r, err := m.picoBench(ctx, n.url, "durable-streams", prefix, p.c, 100, args...)
		if err != nil {
			m.fail(id+" PicoMQ", err)
		} else {
			m.res.Add(id, run, benchreport.SidePico, r.RecordsPerSec, &r.Lat)
		}
		// The reference server has no Prometheus process metrics.
		q, err := m.picoBench(ctx, refURL, "durable-streams", prefix, p.c, 100, append(args, "--metrics", "off")...)
		if err != nil {
			m.fail(id+" reference", err)
			continue
		}
		m.res.Add(id, run, benchreport.SidePeer, q.RecordsPerSec, &q.Lat)
		logf("  %s: PicoMQ %.0f/s, reference %.0f/s", id, r.RecordsPerSec, q.RecordsPerSec)
	}
	m.dsCaddyRows(ctx, run, n.url)
	m.dsFanout(ctx, run, n.url, refURL, peer)
	return nil
}

// Durable Streams live fan-out: dsFanoutReaders SSE readers of one JSON
// stream, dsFanoutRate appends/s of 100 B.
const (
	dsFanoutReaders = 32
	dsFanoutRate    = 20
)

// dsFanout: Durable Streams live fan-out, append-to-delivery latency p50
// and p99 over every delivery, PicoMQ next to the reference server, the
// same client code (the Go SDK's Durable Streams subscription) on both.
func (m *matrix) dsFanout(ctx context.Context, run int, picoURL, refURL, peer string) {
	what := fmt.Sprintf("Durable Streams live fan-out: %d SSE readers of one application/json stream, %d appends/s of 100 B, append-to-delivery", dsFanoutReaders, dsFanoutRate)
	p50 := m.row(benchreport.Row{ID: "ds-fanout-p50", What: what + " p50", Unit: "ms", Peer: peer, LowerBetter: true})
	p99 := m.row(benchreport.Row{ID: "ds-fanout-p99", What: what + " p99, same run", Unit: "ms", Peer: peer, LowerBetter: true})
	load := fanoutLoad{readers: dsFanoutReaders, rate: dsFanoutRate, size: 100, contentType: "application/json", d: m.cfg.secs}
	for _, x := range []struct {
		url, side string
	}{{picoURL, benchreport.SidePico}, {refURL, benchreport.SidePeer}} {
		c, err := picomq.NewDurableStreams(x.url)
		if err != nil {
			m.fail(p50+" "+x.side, err)
			continue
		}
		lat, err := fanout(ctx, c, fmt.Sprintf("/mb/r%d/ds-fanout", run), load)
		c.Close()
		if err != nil {
			m.fail(p50+" "+x.side, err)
			continue
		}
		m.res.Add(p50, run, x.side, lat.P50, lat)
		m.res.Add(p99, run, x.side, lat.P99, nil)
		logf("  %s (%s): p50 %.1f ms, p99 %.1f ms", p50, x.side, lat.P50, lat.P99)
	}
}

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

func clients(c int) string { return plural(c, "client") }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
