package main

// picomq bench: a load generator for appends over either HTTP protocol (the
// Go SDK) or Kafka produce (franz-go), with optional consumers in live-tail
// or catch-up mode (bench_consume.go, bench_target.go). docs/benchmarks.md
// describes the method and the flags.
//
// Closed loop (the default): each producer sends its next append as soon as
// the previous one is acknowledged, which measures the throughput the node
// sustains at that concurrency. Open loop (--rate R): appends are scheduled at
// fixed intended times regardless of how fast acks come, and latency is
// measured from the intended send time, so a stall shows as latency for every
// append scheduled during it instead of being hidden (coordinated omission).

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/hdr"
)

// benchConfig is what one run does.
type benchConfig struct {
	producers   int
	recordSize  int
	batch       int
	streams     int
	duration    time.Duration
	warmup      time.Duration // unmeasured load before duration
	rate        float64       // records/s over all producers; 0 = closed loop
	prefix      string
	keep        bool
	jsonOut     bool
	report      string // rebuild the report in this directory instead of running
	contentType string // of the streams; "" = by protocol (benchContentType)
	metrics     string // the node's /metrics URL for its CPU and RSS; "" = none
	consumers   int    // readers besides the producers; 0 = none
	consume     string // consumeTail or consumeCatchup
	jsonRecords bool   // records are JSON strings (a JSON stream)
}

// benchResult is the --json shape of a run.
type benchResult struct {
	Protocol        string       `json:"protocol"`
	Server          string       `json:"server"`
	Mode            string       `json:"mode"` // "closed" or "open"
	Producers       int          `json:"producers"`
	RecordSize      int          `json:"recordSize"`
	Batch           int          `json:"batch"`
	Streams         int          `json:"streams"`
	RateRecordsPerS float64      `json:"rate,omitempty"`
	DurationSeconds float64      `json:"durationSeconds"`
	Appends         uint64       `json:"appends"`
	Records         uint64       `json:"records"`
	Bytes           uint64       `json:"bytes"`
	Errors          uint64       `json:"errors"`
	FirstError      string       `json:"firstError,omitempty"`
	Unsent          uint64       `json:"unsent,omitempty"`
	RecordsPerSec   float64      `json:"recordsPerSec"`
	MBPerSec        float64      `json:"mbPerSec"`
	AckLatencyMs    latencyStats `json:"ackLatencyMs"`
	// AllRecords counts the warm-up's acknowledged records too.
	AllRecords uint64 `json:"allRecords"`
	// Consume is what the --consumers read (absent without consumers).
	Consume *consumeResult `json:"consume,omitempty"`
	// The node's process metrics (absent without --metrics): its
	// CPU-seconds over the whole run (warm-up and consumers included)
	// per million records appended in it, and its RSS at the end.
	ServerCPUSecondsPerMillion float64 `json:"serverCpuSecondsPerMillionRecords,omitempty"`
	ServerRSSMiB               float64 `json:"serverRssMiB,omitempty"`
}

// latencyStats is the --json latency shape, the one make bench's report
// reads.
type latencyStats = benchreport.Latency

func latencyOf(h *hdr.Histogram) latencyStats {
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	return latencyStats{P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1e6}
}

const benchUsage = `picomq bench [flags]: append (produce) load against a node, with optional consumers:
ack and delivery latency percentiles, throughput.
  --producers N      concurrent producers (default 4)
  --record-size B    bytes per record (default 1024)
  --batch N          records per append (default 1)
  --streams N        streams the producers spread over (default 1)
  --duration D       how long to measure (default 10s)
  --warmup D         unmeasured load before the measured time (default 0)
  --rate R           open loop: R records/s in total, latency from the intended
                     send time; 0 (default) = closed loop, as fast as acks come
  --prefix P         stream name prefix (default /bench/<start time>)
  --content-type T   the streams' content type (default: application/json over
                     Durable Streams, application/octet-stream over Pico)
  --consumers N      readers of the streams, consumer i reads stream i mod
                     --streams (default 0)
  --metrics URL      the node's Prometheus metrics, for its CPU-seconds per million
                     records and its RSS (default: <server>/metrics over HTTP;
                     none over Kafka; off = none)
  --consume MODE     tail (default): live readers from before the first append,
                     append-to-delivery latency of every record; catchup: readers
                     start when the producers stop and read everything, records/s
  --keep             keep the streams afterwards (default: delete them)
  --json             print the result as one JSON object
  --cpuprofile FILE  write a Go CPU profile of this process (the load generator,
                     the SDK included) to FILE, for go tool pprof
  --report DIR       run nothing: rebuild the report of a make bench run in DIR
                     (table.md and SVG charts from DIR/results.json) and print the table
  plus --server, --token, --protocol as for the client commands; --protocol
  kafka produces with franz-go (acks=all, idempotent) to a topic named after
  the prefix (/bench/1 is bench.1) with --streams partitions, and --server is
  then the node's Kafka address (HOST:PORT).
`

// benchCmd runs picomq bench and returns its exit code.
func benchCmd(args []string, e env) int {
	fs := flag.NewFlagSet("picomq bench", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { fmt.Fprint(e.stderr, benchUsage) }
	var cf clientFlags
	cf.register(fs, e.getenv)
	var cfg benchConfig
	fs.IntVar(&cfg.producers, "producers", 4, "concurrent producers")
	fs.IntVar(&cfg.recordSize, "record-size", 1024, "bytes per record")
	fs.IntVar(&cfg.batch, "batch", 1, "records per append")
	fs.IntVar(&cfg.streams, "streams", 1, "streams")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "run time")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "unmeasured time before the run")
	fs.Float64Var(&cfg.rate, "rate", 0, "records/s in total (open loop); 0 = closed loop")
	fs.StringVar(&cfg.prefix, "prefix", "", "stream name prefix")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the streams")
	fs.BoolVar(&cfg.jsonOut, "json", false, "JSON output")
	fs.StringVar(&cfg.report, "report", "", "rebuild the report in DIR")
	fs.StringVar(&cfg.contentType, "content-type", "", "content type of the streams")
	fs.IntVar(&cfg.consumers, "consumers", 0, "consumers")
	fs.StringVar(&cfg.metrics, "metrics", "", "the node's /metrics URL; off = none")
	fs.StringVar(&cfg.consume, "consume", consumeTail, "tail or catchup")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the generator to FILE")
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if cfg.report != "" {
		return benchReport(cfg.report, e)
	}
	if err := cfg.check(pos); err != nil {
		fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
		return exitUsage
	}
	if cfg.prefix == "" {
		cfg.prefix = fmt.Sprintf("/bench/%d", time.Now().UnixNano())
	}
	cfg.metrics = metricsURL(cfg.metrics, cf)
	t, err := cfg.target(cf)
	if err != nil {
		fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
			return exitError
		}
		defer stopProfile()
	}

	var cpu0 float64
	sm := serverMetrics{url: cfg.metrics, token: cf.token}
	if sm.url != "" {
		if cpu0, _, err = sm.read(ctx); err != nil {
			fmt.Fprintf(e.stderr, "picomq bench: server metrics not measured: %v\n", err)
			sm.url = ""
		}
	}
	res, err := runBench(ctx, t, cfg, e)
	if err == nil && sm.url != "" {
		if cpu1, rss, merr := sm.read(ctx); merr != nil {
			fmt.Fprintf(e.stderr, "picomq bench: server metrics not measured: %v\n", merr)
		} else if n := res.AllRecords; n > 0 {
			res.ServerCPUSecondsPerMillion = (cpu1 - cpu0) / float64(n) * 1e6
			res.ServerRSSMiB = rss / (1 << 20)
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
		return exitCode(err)
	}
	res.Server = cf.server
	if cfg.jsonOut {
		err = writeJSON(e.stdout, res)
	} else {
		err = writeBenchTable(e.stdout, res)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
		return exitError
	}
	if res.Appends == 0 {
		fmt.Fprintf(e.stderr, "picomq bench: no append was acknowledged (%d errors: %s)\n", res.Errors, res.FirstError)
		return exitError
	}
	return exitOK
}

// startCPUProfile profiles this process into path until the returned
// function is called: the generator shares the CPU with the node on one
// machine, so where its own time goes is part of every result.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func (cfg *benchConfig) check(pos []string) error {
	switch {
	case len(pos) > 0:
		return usagef("unexpected arguments %q", pos)
	case cfg.producers < 1 || cfg.producers > 10000:
		return usagef("--producers must be in 1..10000")
	case cfg.recordSize < 2 || cfg.recordSize > 16<<20:
		return usagef("--record-size must be in 2..16777216")
	case cfg.batch < 1 || cfg.batch > 100000:
		return usagef("--batch must be in 1..100000")
	case cfg.streams < 1 || cfg.streams > 100000:
		return usagef("--streams must be in 1..100000")
	case cfg.duration <= 0:
		return usagef("--duration must be positive")
	case cfg.warmup < 0:
		return usagef("--warmup must not be negative")
	case cfg.rate < 0:
		return usagef("--rate must not be negative")
	case cfg.prefix != "" && !strings.HasPrefix(cfg.prefix, "/"):
		return usagef("--prefix %q: names are paths such as /bench", cfg.prefix)
	case cfg.consumers < 0 || cfg.consumers > 10000:
		return usagef("--consumers must be in 0..10000")
	case cfg.consume != consumeTail && cfg.consume != consumeCatchup:
		return usagef("--consume must be tail or catchup")
	case cfg.consumers > 0 && cfg.consume == consumeTail && cfg.recordSize < stampDigits+3:
		return usagef("--consume tail needs --record-size of at least %d (each record carries its send time)", stampDigits+3)
	}
	return nil
}

// target is the system the flags name: a Kafka listener, or a node over
// either HTTP protocol.
func (cfg *benchConfig) target(cf clientFlags) (benchTarget, error) {
	if cf.protocol == "kafka" {
		switch {
		case strings.Contains(cf.server, "://"):
			return nil, usagef("--protocol kafka: --server is the node's Kafka address HOST:PORT, not %q", cf.server)
		case cf.token != "":
			return nil, usagef("--protocol kafka: --token is not supported by the bench's Kafka producer")
		case cfg.contentType != "":
			return nil, usagef("--protocol kafka: a topic has no --content-type")
		}
		return &kafkaTarget{addr: cf.server, cfg: *cfg}, nil
	}
	c, err := cf.client()
	if err != nil {
		return nil, err
	}
	ct := benchContentType(c.Protocol(), cfg.contentType)
	cfg.jsonRecords = strings.HasPrefix(ct, "application/json")
	return &httpTarget{c: c, cfg: *cfg, ct: ct}, nil
}

// benchReport rebuilds the Markdown table and SVG charts of a make bench
// run from its results.json and prints the table.
func benchReport(dir string, e env) int {
	res, err := benchreport.Load(dir)
	if err == nil {
		err = res.Write(dir)
	}
	if err == nil {
		err = res.Table(e.stdout)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "picomq bench --report: %v\n", err)
		return exitError
	}
	return exitOK
}

// benchProducer is one producer's state; its histogram is read by the
// progress line under mu.
type benchProducer struct {
	mu   sync.Mutex
	hist hdr.Histogram
}

func (p *benchProducer) record(ns int64) {
	p.mu.Lock()
	p.hist.Record(ns)
	p.mu.Unlock()
}

// benchRun is the shared state of one run.
type benchRun struct {
	cfg       benchConfig
	producers []*benchProducer
	appends   atomic.Uint64
	all       atomic.Uint64 // acknowledged appends, warm-up included
	errors    atomic.Uint64
	errOnce   sync.Once
	firstErr  string
	// measureFrom ends the warm-up: appends intended before it are
	// neither counted nor timed.
	measureFrom time.Time
	// stampAt is where each record carries its intended send time for
	// the tail consumers (-1: not stamped).
	stampAt int
}

func (r *benchRun) fail(err error) {
	r.errors.Add(1)
	r.errOnce.Do(func() { r.firstErr = err.Error() })
}

func (r *benchRun) merged() *hdr.Histogram {
	var h hdr.Histogram
	for _, p := range r.producers {
		p.mu.Lock()
		h.Merge(&p.hist)
		p.mu.Unlock()
	}
	return &h
}

// benchRecords builds one append's records: JSON strings of exactly size
// bytes on a JSON stream, random bytes otherwise.
func benchRecords(jsonStream bool, size, batch int) []picomq.AppendRecord {
	recs := make([]picomq.AppendRecord, batch)
	for i := range recs {
		b := make([]byte, size)
		if jsonStream {
			for j := range b {
				b[j] = 'a' + byte((i+j)%26)
			}
			b[0], b[size-1] = '"', '"'
		} else {
			_, _ = rand.Read(b)
		}
		recs[i].Body = b
	}
	return recs
}

// benchContentType is the streams' content type: --content-type, else
// application/json over Durable Streams, so that a batch of N records
// stays N messages (a byte stream's append is one message whatever its
// size), and application/octet-stream over Pico.
func benchContentType(p picomq.Protocol, flag string) string {
	switch {
	case flag != "":
		return flag
	case p == picomq.ProtocolDurableStreams:
		return "application/json"
	}
	return "application/octet-stream"
}

func runBench(ctx context.Context, t benchTarget, cfg benchConfig, e env) (benchResult, error) {
	if err := t.setup(ctx); err != nil {
		return benchResult{}, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := t.teardown(dctx, cfg.keep); err != nil {
			fmt.Fprintf(e.stderr, "picomq bench: %v\n", err)
		}
	}()

	r := &benchRun{cfg: cfg, producers: make([]*benchProducer, cfg.producers), stampAt: -1}
	if cfg.consumers > 0 && cfg.consume == consumeTail {
		r.stampAt = 0
		if cfg.jsonRecords {
			r.stampAt = 1 // inside the JSON string
		}
	}
	appends := make([]appendFunc, cfg.producers)
	for i := range r.producers {
		r.producers[i] = &benchProducer{}
		var err error
		if appends[i], err = t.producer(i); err != nil {
			return benchResult{}, err
		}
	}
	start := time.Now()
	r.measureFrom = start.Add(cfg.warmup)
	var tail *benchConsumers
	if r.stampAt >= 0 {
		// Live consumers are reading before the first append.
		tail = startConsumers(ctx, t, cfg.consumers, true, r.measureFrom.UnixNano(), r.stampAt)
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.warmup+cfg.duration)
	defer cancel()

	// Open loop: the scheduler hands out intended send times; a producer
	// that picks one up late still measures from the intended time.
	var schedule chan time.Time
	var unsent atomic.Uint64
	if cfg.rate > 0 {
		schedule = make(chan time.Time, 1<<16)
		go scheduleAppends(runCtx, start, cfg, schedule, &unsent)
	}

	var wg sync.WaitGroup
	for i, p := range r.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(runCtx, appends[i], p, benchRecords(cfg.jsonRecords, cfg.recordSize, cfg.batch), schedule)
		}()
	}
	progressDone := make(chan struct{})
	if e.stderrTTY {
		go r.progress(runCtx, e.stderr, progressDone, tail)
	} else {
		close(progressDone)
	}
	wg.Wait()
	elapsed := time.Since(r.measureFrom)
	cancel()
	<-progressDone
	if schedule != nil {
		// Appends scheduled but never started before the end: the node
		// could not keep up with the rate.
		unsent.Add(uint64(len(schedule)))
	}
	if ctx.Err() != nil {
		return benchResult{}, ctx.Err()
	}

	h := r.merged()
	appended := r.appends.Load()
	recs := appended * uint64(cfg.batch)
	bytes := recs * uint64(cfg.recordSize)
	secs := elapsed.Seconds()
	mode := "closed"
	if cfg.rate > 0 {
		mode = "open"
	}
	res := benchResult{
		Protocol: t.protocol(), Mode: mode, Producers: cfg.producers, RecordSize: cfg.recordSize,
		Batch: cfg.batch, Streams: cfg.streams, RateRecordsPerS: cfg.rate, DurationSeconds: secs,
		Appends: appended, Records: recs, Bytes: bytes, Errors: r.errors.Load(), FirstError: r.firstErr,
		Unsent: unsent.Load(), RecordsPerSec: float64(recs) / secs, MBPerSec: float64(bytes) / 1e6 / secs,
		AckLatencyMs: latencyOf(h), AllRecords: r.all.Load() * uint64(cfg.batch),
	}
	if cfg.consumers == 0 {
		return res, nil
	}
	var c consumeResult
	var err error
	if tail != nil {
		c, err = tail.drain(secs)
	} else {
		// Catch-up: the consumers start now and read everything from the
		// start, warm-up included.
		cs := startConsumers(ctx, t, cfg.consumers, false, 0, -1)
		c, err = cs.wait()
	}
	if err != nil {
		return res, err
	}
	c.Consumers, c.Mode = cfg.consumers, cfg.consume
	res.Consume = &c
	return res, nil
}

// scheduleAppends emits the intended send time of every append at
// rate/batch appends per second until ctx ends. Intended times are computed
// from start, never from when the previous one was taken, so a backlog does
// not slow the schedule down.
func scheduleAppends(ctx context.Context, start time.Time, cfg benchConfig, out chan<- time.Time, unsent *atomic.Uint64) {
	interval := time.Duration(float64(time.Second) * float64(cfg.batch) / cfg.rate)
	if interval <= 0 {
		interval = 1
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for k := int64(0); ; k++ {
		at := start.Add(time.Duration(k) * interval)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		select {
		case out <- at:
		case <-ctx.Done():
			return
		default:
			// The backlog is full: count it as unsent rather than
			// blocking, which would stop the clock.
			unsent.Add(1)
		}
	}
}

// produce appends until ctx ends: back to back (closed loop) or at the
// times schedule hands out (open loop).
func (r *benchRun) produce(ctx context.Context, appendBatch appendFunc, p *benchProducer, recs []picomq.AppendRecord, schedule <-chan time.Time) {
	for {
		var intended time.Time
		if schedule != nil {
			select {
			case <-ctx.Done():
				return
			case intended = <-schedule:
			}
		} else {
			if ctx.Err() != nil {
				return
			}
			intended = time.Now()
		}
		if r.stampAt >= 0 {
			for i := range recs {
				stamp(recs[i].Body, r.stampAt, intended)
			}
		}
		err := appendBatch(ctx, recs)
		if err == nil {
			r.all.Add(1)
		}
		if intended.Before(r.measureFrom) {
			continue // warm-up
		}
		if err != nil {
			if ctx.Err() != nil {
				return // cut off by the end of the run, not a failure
			}
			r.fail(err)
			continue
		}
		p.record(time.Since(intended).Nanoseconds())
		r.appends.Add(1)
	}
}

// progress prints one status line a second on a terminal.
func (r *benchRun) progress(ctx context.Context, w io.Writer, done chan<- struct{}, tail *benchConsumers) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(w)
			return
		case now := <-t.C:
			secs := now.Sub(r.measureFrom).Seconds()
			if secs <= 0 {
				continue
			}
			recs := float64(r.appends.Load()) * float64(r.cfg.batch)
			l := latencyOf(r.merged())
			fmt.Fprintf(w, "\r\033[Kbench %3.0fs/%s: %.0f records/s, %.1f MB/s, ack p50 %.2f ms p99 %.2f ms, %d errors",
				secs, r.cfg.duration, recs/secs, recs*float64(r.cfg.recordSize)/1e6/secs, l.P50, l.P99, r.errors.Load())
			if tail != nil {
				fmt.Fprintf(w, ", delivered %.0f records/s", float64(tail.records.Load())/secs)
			}
		}
	}
}

func writeBenchTable(w io.Writer, res benchResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "protocol\t%s (%s loop)\n", res.Protocol, res.Mode)
	fmt.Fprintf(tw, "load\t%d producers, %d streams, %d records x %d B per append", res.Producers, res.Streams, res.Batch, res.RecordSize)
	if res.RateRecordsPerS > 0 {
		fmt.Fprintf(tw, ", %.0f records/s offered", res.RateRecordsPerS)
	}
	fmt.Fprintf(tw, "\nduration\t%.1f s\n", res.DurationSeconds)
	fmt.Fprintf(tw, "throughput\t%.0f records/s, %.2f MB/s (%d appends)\n", res.RecordsPerSec, res.MBPerSec, res.Appends)
	l := res.AckLatencyMs
	fmt.Fprintf(tw, "ack latency ms\tp50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
	fmt.Fprintf(tw, "errors\t%d", res.Errors)
	if res.FirstError != "" {
		fmt.Fprintf(tw, " (first: %s)", res.FirstError)
	}
	fmt.Fprintln(tw)
	if res.ServerRSSMiB > 0 {
		fmt.Fprintf(tw, "server\t%.2f CPU-seconds per million records, RSS %.1f MiB\n", res.ServerCPUSecondsPerMillion, res.ServerRSSMiB)
	}
	if c := res.Consume; c != nil {
		fmt.Fprintf(tw, "consumers\t%d, %s: %d records, %.0f records/s, %.2f MB/s\n", c.Consumers, c.Mode, c.Records, c.RecordsPerSec, c.MBPerSec)
		if l := c.DeliveryLatencyMs; l != nil {
			fmt.Fprintf(tw, "delivery latency ms\tp50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
		}
	}
	if res.Unsent > 0 {
		fmt.Fprintf(tw, "unsent\t%d appends scheduled but not started: the node did not keep up with --rate\n", res.Unsent)
	}
	return tw.Flush()
}
