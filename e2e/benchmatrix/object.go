package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// Object-store load: objectMiB of 1 KiB records appended to one stream in
// 1 MiB batches by 4 writers, then read back cold.
const objectMiB = 64

// objectRows: a node on MinIO (started by deploy/local-minio.sh in a state
// dir of its own): object-store PUTs per GiB ingested next to the seal
// policy's ideal (one object per --seal-max-bytes, 8 MiB), and a cold read
// of what was written (the node restarted, so its read cache is empty)
// next to plain sequential GETs of the same objects from the same MinIO.
func (m *matrix) objectRows(ctx context.Context, run int) error {
	s3, err := m.minio()
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("r%d/", run)
	kafkaAddr, err := testproc.FreeAddr()
	if err != nil {
		return err
	}
	defer pretouchNodes()()
	pprofFlags, pprofAddr := pprofArgs()
	n, err := m.startNode("pico-object", append([]string{"--object-store", s3.url(prefix), "--kafka-addr", kafkaAddr}, pprofFlags...)...)
	if err != nil {
		return err
	}
	defer func() { n.stop() }()
	c, err := picomq.NewPico(n.url)
	if err != nil {
		return err
	}
	defer c.Close()
	s := c.Stream("/mb/object")
	if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
		return err
	}
	flushes0, _ := metric(n.url, "picomq_flushes_total")
	if err := ingestObject(ctx, n, s); err != nil {
		return err
	}
	flushes1, err := metric(n.url, "picomq_flushes_total")
	if err != nil {
		return err
	}
	const puts = "puts-per-gib"
	m.row(benchreport.Row{ID: puts, What: fmt.Sprintf("object-store PUTs per GiB ingested (%d MiB, one stream, unpaced)", objectMiB),
		Unit: "PUTs/GiB", Peer: "one object per --seal-max-bytes (8 MiB)", LowerBetter: true})
	m.res.Add(puts, run, benchreport.SidePico, (flushes1-flushes0)/(objectMiB/1024.0), nil)
	m.res.Add(puts, run, benchreport.SidePeer, 1024.0/8, nil)

	// Cold read: a restarted node has an empty read cache.
	n.stop()
	if err := n.restart("picomq", m.cfg.picomq); err != nil {
		return err
	}
	stopProfile := profileRead("cold-read", pprofAddr)
	cpu0, ccpu0 := testproc.CPUSeconds(n.pid), testproc.CPUSeconds(os.Getpid())
	t0 := time.Now()
	// The reader keeps no record past Next, as the bare relay's reader
	// keeps no byte: ReuseBuffers, as the other cold rows (freshPages).
	it := s.Records(c.Beginning(), picomq.RecordsOptions{ReuseBuffers: !freshPages()})
	var bytes int64
	for it.Next(ctx) {
		bytes += int64(len(it.Record().Body))
	}
	el := time.Since(t0)
	nodeCPU, clientCPU := testproc.CPUSeconds(n.pid)-cpu0, testproc.CPUSeconds(os.Getpid())-ccpu0
	stopProfile()
	if err := it.Err(); err != nil || bytes != objectMiB<<20 {
		return fmt.Errorf("cold read: %d of %d bytes: %v", bytes, objectMiB<<20, err)
	}
	const cold = "cold-read"
	m.row(benchreport.Row{ID: cold, What: "cold read of that stream from the start (node restarted: empty cache; --cache-pretouch), record bytes, the Go SDK reading with ReuseBuffers", Unit: "MB/s",
		Peer: "sequential whole-object GETs of the node's objects from the same MinIO"})
	coldMBs := float64(bytes) / 1e6 / el.Seconds()
	m.res.Add(cold, run, benchreport.SidePico, coldMBs, nil)

	st, err := storeurl.Open(ctx, s3.url(prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	t0 = time.Now()
	var got int64
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return err
		}
		buf := make([]byte, a.Size)
		k, err := st.ReadAt(ctx, a.Key, buf, 0)
		if err != nil {
			return fmt.Errorf("GET %s: %w", a.Key, err)
		}
		got += int64(k)
	}
	el = time.Since(t0)
	m.res.Add(cold, run, benchreport.SidePeer, float64(got)/1e6/el.Seconds(), nil)
	logf("  object: %.0f PUTs/GiB; cold read %.0f MB/s (CPU: node %.0f ms, client %.0f ms), MinIO GETs %.0f MB/s (%d bytes)", (flushes1-flushes0)/(objectMiB/1024.0),
		coldMBs, nodeCPU*1000, clientCPU*1000, float64(got)/1e6/el.Seconds(), got)
	m.coldReadFloors(ctx, run, st, s3.url(prefix), coldMBs, float64(got)/1e6/el.Seconds(), got)

	// The same history over Kafka: a consumer reading last week.
	const kcold = "cold-read-kafka"
	m.row(benchreport.Row{ID: kcold, What: "Kafka consume of that stream from the start, cold (node restarted), one franz-go consumer, record bytes", Unit: "MB/s",
		Pico: "PicoMQ Kafka fetch", Peer: "an HTTP cold read of it, node restarted, the Go SDK taking each page into a new buffer as a Kafka client takes each fetch, same run"})
	n.stop()
	if err := n.restart("picomq", m.cfg.picomq); err != nil {
		return err
	}
	stopProfile = profileRead("cold-read-kafka", pprofAddr)
	cpu0 = testproc.CPUSeconds(n.pid)
	k, err := kafkaColdRead(ctx, n.kafkaAddr, "mb.object", objectMiB<<10)
	nodeCPU = testproc.CPUSeconds(n.pid) - cpu0
	stopProfile()
	// Its peer is the HTTP cold read with the SDK's default pages: franz-go
	// reads every fetch into a new buffer, so the cold row's reused
	// buffers would compare clients, not the node's two read paths.
	httpMBs := coldMBs
	if err == nil && !freshPages() {
		n.stop()
		if err := n.restart("picomq", m.cfg.picomq); err != nil {
			return err
		}
		httpMBs, err = coldRead(ctx, c, "/mb/object", objectMiB<<20)
	}
	if err != nil {
		m.fail(kcold, err)
	} else {
		m.res.Add(kcold, run, benchreport.SidePico, k, nil)
		m.res.Add(kcold, run, benchreport.SidePeer, httpMBs, nil)
		logf("  object: Kafka cold %.0f MB/s (node CPU %.0f ms), HTTP cold with fresh pages %.0f MB/s", k, nodeCPU*1000, httpMBs)
	}

	// Object storage across a network: every request to MinIO takes
	// getLatency longer, for the node and the floors alike.
	n.stop()
	if s3.external {
		// The proxy stands for a store across a network; an external
		// store is one (and S3 would refuse requests signed for the
		// proxy's address).
		logf("  object +%v: not measured against an external store", getLatency)
		return nil
	}
	if err := m.coldReadSlowStore(ctx, run, s3); err != nil {
		m.fail("cold read with latency", err)
	}
	return nil
}

// ingestObject appends objectMiB of 1 KiB records to s in 1 MiB batches
// from 4 writers and waits until n has all of it in the object store.
func ingestObject(ctx context.Context, n *node, s picomq.Stream) error {
	batch := make([]picomq.AppendRecord, 1024)
	for i := range batch {
		batch[i].Body = make([]byte, 1024)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < objectMiB; i += 4 {
				if _, err := s.Append(ctx, batch...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		u, err := metric(n.url, "picomq_unflushed_bytes")
		if err == nil && u == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %v unflushed bytes after 2 minutes (%v)", u, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// slowSealBytes is --seal-max-bytes of the +latency row's node: its
// stream is made of objects of about 1 MiB, the ones a stream appended at
// 1 MB/s leaves behind when it is flushed every --seal-max-age (1 s). A
// reader of a slow stream's history waits on many small objects, which is
// where GETs one at a time cost a round trip each.
const slowSealBytes = 1 << 20

// ingestPaced appends objectMiB of 1 KiB records to s one MiB at a time,
// each only once n has flushed the one before: an object per MiB, as a
// stream appended at 1 MB/s and flushed every second leaves them, without
// taking a minute to write.
func ingestPaced(ctx context.Context, n *node, s picomq.Stream) error {
	batch := make([]picomq.AppendRecord, 1024)
	for i := range batch {
		batch[i].Body = make([]byte, 1024)
	}
	for i := range objectMiB {
		if _, err := s.Append(ctx, batch...); err != nil {
			return fmt.Errorf("ingest MiB %d: %w", i, err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			u, err := metric(n.url, "picomq_unflushed_bytes")
			if err == nil && u == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ingest MiB %d: still %v unflushed bytes after a minute (%v)", i, u, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// coldReadSlowStore writes objectMiB to a stream of a node of its own
// whose objects are slowSealBytes each, restarts that node on a latency
// proxy in front of MinIO and reads the stream cold, next to the same
// store's parallel-GET floor and one-GET-at-a-time reading of the same
// objects.
func (m *matrix) coldReadSlowStore(ctx context.Context, run int, s3 minio) error {
	prefix := fmt.Sprintf("r%d-slow/", run)
	pprofFlags, pprofAddr := pprofArgs()
	n, err := m.startNode("pico-slow", append([]string{"--object-store", s3.url(prefix), "--seal-max-bytes", fmt.Sprint(slowSealBytes)}, pprofFlags...)...)
	if err != nil {
		return err
	}
	defer func() { n.stop() }()
	{
		c, err := picomq.NewPico(n.url)
		if err != nil {
			return err
		}
		s := c.Stream("/mb/object")
		if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
			c.Close()
			return err
		}
		err = ingestPaced(ctx, n, s)
		c.Close()
		if err != nil {
			return err
		}
	}
	px, err := startLatencyProxy(s3.endpoint, getLatency)
	if err != nil {
		return err
	}
	defer px.close()
	slow := minio{endpoint: px.endpoint(), bucket: s3.bucket}
	n.stop()
	i := slices.Index(n.args, "--object-store")
	n.args[i+1] = slow.url(prefix)
	if err := n.restart("picomq", m.cfg.picomq); err != nil {
		return err
	}
	c, err := picomq.NewPico(n.url)
	if err != nil {
		return err
	}
	defer c.Close()
	px.writeLog("proxy-before-read.log")
	stopProfile := profileRead("cold-read-latency", pprofAddr)
	pico, err := coldRead(ctx, c, "/mb/object", objectMiB<<20)
	stopProfile()
	px.writeLog("proxy-cold-read-latency.log")
	if err != nil {
		return err
	}
	st, err := storeurl.Open(ctx, slow.url(prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	par, err := parallelGETs(ctx, st)
	if err != nil {
		return err
	}
	seq, err := sequentialGETs(ctx, st)
	if err != nil {
		return err
	}
	objects := 0
	for _, err := range st.List(ctx, "") {
		if err != nil {
			return err
		}
		objects++
	}
	what := fmt.Sprintf("cold read of a %d MiB stream made of %d objects (each MiB flushed before the next, as a 1 MB/s stream is) with %v added to every object-store request (a proxy in front of MinIO)", objectMiB, objects, getLatency)
	const par1, seq1 = "cold-read-latency", "cold-read-latency-seq"
	m.row(benchreport.Row{ID: par1, What: what, Unit: "MB/s",
		Peer: fmt.Sprintf("parallel-GET floor: the same objects as %d MiB ranged GETs, %d in flight, through the same proxy", floorRange>>20, floorGETs)})
	m.row(benchreport.Row{ID: seq1, What: what + ", same run", Unit: "MB/s",
		Peer: "one GET at a time: whole objects in turn through the same proxy"})
	m.res.Add(par1, run, benchreport.SidePico, pico, nil)
	m.res.Add(par1, run, benchreport.SidePeer, par, nil)
	m.res.Add(seq1, run, benchreport.SidePico, pico, nil)
	m.res.Add(seq1, run, benchreport.SidePeer, seq, nil)
	logf("  object +%v: cold read %.0f MB/s, parallel GETs %.0f MB/s, one at a time %.0f MB/s (%d objects)", getLatency, pico, par, seq, objects)
	return nil
}

// manyReadersRows: manyReaders streams of manyMiB each, read cold at the
// same time by one reader each (a node restarted with a small cache and
// read-ahead budget): aggregate MB/s next to the store's parallel-GET
// floor for the same objects, and the node's RSS growth during the read
// next to the memory its budgets allow.
func (m *matrix) manyReadersRows(ctx context.Context, run int) error {
	s3, err := m.minio()
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("r%d-many/", run)
	// The readers keep no record past Next, as the floor's bare readers
	// keep no byte: they read with ReuseBuffers unless
	// PICOMQ_BENCH_FRESH_PAGES is set (the default client: a fresh buffer
	// per page), as the running cold read does.
	fresh := freshPages()
	defer pretouchNodes()()
	// The read-ahead budget goes by environment, which a binary from
	// before the flag ignores, so before/after runs use the same harness.
	os.Setenv("PICOMQ_READ_AHEAD_BYTES", fmt.Sprint(manyAheadMiB<<20))
	defer os.Unsetenv("PICOMQ_READ_AHEAD_BYTES")
	pprofFlags, pprofAddr := pprofArgs()
	n, err := m.startNode("pico-many", append([]string{"--object-store", s3.url(prefix), "--cache-bytes", fmt.Sprint(manyCacheMiB << 20)}, pprofFlags...)...)
	if err != nil {
		return err
	}
	defer func() { n.stop() }()
	c, err := picomq.NewPico(n.url)
	if err != nil {
		return err
	}
	defer c.Close()
	batch := make([]picomq.AppendRecord, 1024)
	for i := range batch {
		batch[i].Body = make([]byte, 1024)
	}
	name := func(i int) string { return fmt.Sprintf("/mb/many/%d", i) }
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= manyReaders {
					return
				}
				s := c.Stream(name(i))
				if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
					errs <- err
					return
				}
				for range manyMiB {
					if _, err := s.Append(ctx, batch...); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		u, err := metric(n.url, "picomq_unflushed_bytes")
		if err == nil && u == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %v unflushed bytes after 2 minutes (%v)", u, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.stop()
	if err := n.restart("picomq", m.cfg.picomq); err != nil {
		return err
	}
	// Memory the node touched at start for its read cache
	// (--cache-pretouch) counts as the reads' growth: it is theirs.
	pretouched, _ := metric(n.url, "picomq_cache_pooled_bytes")
	rss0 := testproc.RSSBytes(n.pid) - pretouched
	cache0 := cacheMetrics(n.url)
	stopRSS := peakRSS(n.pid)
	stopProfile := profileRead("cold-many", pprofAddr)
	cpu0, ccpu0, scpu0 := testproc.CPUSeconds(n.pid), testproc.CPUSeconds(os.Getpid()), s3.cpu()
	t0 := time.Now()
	var total atomic.Int64
	errs = make(chan error, manyReaders)
	for i := range manyReaders {
		wg.Go(func() {
			it := c.Stream(name(i)).Records(c.Beginning(), picomq.RecordsOptions{ReuseBuffers: !fresh})
			var got int64
			for it.Next(ctx) {
				got += int64(len(it.Record().Body))
			}
			if err := it.Err(); err != nil || got != manyMiB<<20 {
				errs <- fmt.Errorf("reader %d: %d of %d bytes: %v", i, got, manyMiB<<20, err)
			}
			total.Add(got)
		})
	}
	wg.Wait()
	el := time.Since(t0)
	nodeCPU, clientCPU, storeCPU := testproc.CPUSeconds(n.pid)-cpu0, testproc.CPUSeconds(os.Getpid())-ccpu0, s3.cpu()-scpu0
	peak := stopRSS()
	stopProfile()
	cache1 := cacheMetrics(n.url)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	st, err := storeurl.Open(ctx, s3.url(prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	agg := float64(total.Load()) / 1e6 / el.Seconds()
	floor, err := m.manyReadersFloor(ctx, run, st, s3, s3.url(prefix), agg, float64(total.Load()))
	if err != nil {
		return err
	}
	const many, rss = "cold-many", "cold-many-rss"
	m.row(benchreport.Row{ID: many, What: fmt.Sprintf("%d concurrent cold catch-up readers of different streams (%d MiB each), aggregate record bytes", manyReaders, manyMiB),
		Unit: "MB/s", Peer: fmt.Sprintf("parallel-GET floor: the node's objects as %d MiB ranged GETs, %d in flight", floorRange>>20, floorGETs)})
	m.row(benchreport.Row{ID: rss, What: fmt.Sprintf("node RSS growth during those reads, with the read-cache memory it touched at start (--cache-bytes %d MiB, --read-ahead-bytes %d MiB, --cache-pretouch)", manyCacheMiB, manyAheadMiB),
		Unit: "MiB", Peer: "the budgets' bound: cache + 3 x read-ahead", LowerBetter: true})
	m.res.Add(many, run, benchreport.SidePico, agg, nil)
	m.res.Add(many, run, benchreport.SidePeer, floor, nil)
	m.res.Add(rss, run, benchreport.SidePico, (peak-rss0)/(1<<20), nil)
	m.res.Add(rss, run, benchreport.SidePeer, manyCacheMiB+3*manyAheadMiB, nil)
	logf("  object: %d cold readers %.0f MB/s aggregate (%.2f s), parallel GETs %.0f MB/s; RSS %.0f -> %.0f MiB; CPU: node %.0f ms, client %.0f ms, MinIO %.0f ms; cache: %s",
		manyReaders, agg, el.Seconds(), floor, rss0/(1<<20), peak/(1<<20), nodeCPU*1000, clientCPU*1000, storeCPU*1000, cacheDelta(cache0, cache1))
	return nil
}

// minio is a MinIO the matrix started.
type minio struct {
	endpoint, bucket string
	pid              int // 0 if unknown (the rows then leave its CPU out)
	// region is the store's region; empty means us-east-1 (MinIO's).
	region string
	// root prefixes every key the matrix writes: empty on the matrix's
	// own MinIO, unique per matrix on an external store, whose bucket
	// outlives the matrix and may hold another matrix's runs.
	root string
	// external: a store the matrix did not start (externalStore).
	external bool
}

// cpu returns the MinIO process's CPU seconds so far (0 if unknown).
func (s minio) cpu() float64 {
	if s.pid == 0 {
		return 0
	}
	return testproc.CPUSeconds(s.pid)
}

// url is the --object-store URL of the bucket under prefix.
func (s minio) url(prefix string) string {
	return fmt.Sprintf("s3://%s/%s%s?endpoint=%s&region=%s", s.bucket, s.root, strings.TrimSuffix(prefix, "/"), s.endpoint, s.regionOrDefault())
}

func (s minio) regionOrDefault() string { return cmp.Or(s.region, "us-east-1") }

// externalStore is the object store of PICOMQ_BENCH_S3_ENDPOINT, if set:
// the object rows then run against a store on other hardware (another
// machine's MinIO, or S3 itself), with credentials from
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the bucket from
// PICOMQ_BENCH_S3_BUCKET (it must exist) and the region from
// PICOMQ_BENCH_S3_REGION. On one small VM the store shares the node's
// cores, and issue 31's floors show two of its rows above that machine;
// this is how they are measured where the store has cores of its own.
func externalStore() (minio, bool, error) {
	ep := os.Getenv("PICOMQ_BENCH_S3_ENDPOINT")
	if ep == "" {
		return minio{}, false, nil
	}
	bucket := os.Getenv("PICOMQ_BENCH_S3_BUCKET")
	if bucket == "" {
		return minio{}, true, errors.New("PICOMQ_BENCH_S3_ENDPOINT is set: PICOMQ_BENCH_S3_BUCKET must name an existing bucket")
	}
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		return minio{}, true, errors.New("PICOMQ_BENCH_S3_ENDPOINT is set: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be too")
	}
	region := cmp.Or(os.Getenv("PICOMQ_BENCH_S3_REGION"), "us-east-1")
	os.Setenv("AWS_REGION", region) // the nodes the matrix starts inherit it
	root := fmt.Sprintf("picomq-bench-%s-%d/", time.Now().UTC().Format("20060102T150405"), os.Getpid())
	return minio{endpoint: ep, bucket: bucket, region: region, root: root, external: true}, true, nil
}

// minio returns the matrix's MinIO, starting it the first time: one for
// all runs (each run writes under its own prefix), because a MinIO start
// on a busy machine can take longer than local-minio.sh waits; a failed
// start is tried once more.
func (m *matrix) minio() (minio, error) {
	if m.s3.endpoint != "" {
		return m.s3, nil
	}
	if s, ok, err := externalStore(); ok {
		if err == nil {
			m.s3 = s
			m.res.Machine += "; object store: " + s.endpoint + " (external: not started by the matrix)"
			logf("  object rows: external store %s, bucket %s, keys under %s", s.endpoint, s.bucket, s.root)
		}
		return s, err
	}
	var err error
	for range 2 {
		if m.s3, m.stopS3, err = m.startMinio(); err == nil {
			return m.s3, nil
		}
		logf("  %v", err)
	}
	return minio{}, err
}

// startMinio starts a MinIO with deploy/local-minio.sh (which builds the
// pinned MinIO into the tool cache the first time) in a state dir under
// the work dir, and sets the credentials in this process's environment,
// which the nodes it starts inherit.
func (m *matrix) startMinio() (minio, func(), error) {
	state := filepath.Join(m.cfg.work, "minio")
	script := "deploy/local-minio.sh"
	// Port 29000 unless PICOMQ_BENCH_MINIO_PORT says otherwise: two
	// matrices on one machine must not stop each other's MinIO.
	port := cmp.Or(os.Getenv("PICOMQ_BENCH_MINIO_PORT"), "29000")
	env := append(os.Environ(), "PICOMQ_MINIO_STATE="+state, "PICOMQ_MINIO_PORT="+port)
	cmd := exec.Command(script, "start")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		return minio{}, nil, fmt.Errorf("%s start: %v\n%s", script, err, out)
	}
	stop := func() {
		c := exec.Command(script, "stop")
		c.Env = env
		_ = c.Run()
	}
	vals := map[string]string{}
	f, err := os.Open(filepath.Join(state, "env"))
	if err != nil {
		stop()
		return minio{}, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vals[k] = v
		}
	}
	os.Setenv("AWS_ACCESS_KEY_ID", vals["PICOMQ_S3_ACCESS_KEY"])
	os.Setenv("AWS_SECRET_ACCESS_KEY", vals["PICOMQ_S3_SECRET_KEY"])
	os.Setenv("AWS_REGION", "us-east-1")
	pid := 0
	if b, err := os.ReadFile(filepath.Join(state, "minio.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return minio{endpoint: vals["PICOMQ_S3_ENDPOINT"], bucket: vals["PICOMQ_S3_BUCKET"], pid: pid}, stop, nil
}

// metric reads one unlabelled metric from a node's /metrics.
func metric(nodeURL, name string) (float64, error) {
	b, err := httpGet(nodeURL + "/metrics")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no metric %s", nodeURL, name)
}

// cacheCounters are the node's read-cache counters the many-readers row
// logs (docs/benchmarks.md reads them: GETs against objects, bytes
// fetched against bytes read, readers waiting for demand GETs or for
// read-ahead).
var cacheCounters = []string{"picomq_cache_requests_total", "picomq_cache_fetched_bytes_total", "picomq_cache_miss_blocks_total",
	"picomq_cache_joined_blocks_total", "picomq_cache_hit_blocks_total", "picomq_cache_prefetch_blocks_total",
	"picomq_cache_read_ahead_skipped_blocks_total", "picomq_cache_fetch_waits_total", "picomq_cache_read_ahead_yields_total",
	"picomq_cache_refetched_blocks_total", "picomq_cache_straddle_copy_bytes_total",
	"picomq_cache_recycled_bytes_total", "picomq_cache_reused_bytes_total", "picomq_cache_escaped_runs_total"}

// cacheMetrics reads cacheCounters from a node (a missing one is absent).
func cacheMetrics(nodeURL string) map[string]float64 {
	out := map[string]float64{}
	b, err := httpGet(nodeURL + "/metrics")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, name := range cacheCounters {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[name] = f
				}
			}
		}
	}
	return out
}

// cacheDelta formats the counters' growth from a to b.
func cacheDelta(a, b map[string]float64) string {
	var parts []string
	for _, name := range cacheCounters {
		if v, ok := b[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimSuffix(strings.TrimPrefix(name, "picomq_cache_"), "_total"), v-a[name]))
		}
	}
	return strings.Join(parts, ", ")
}

// freshPages: PICOMQ_BENCH_FRESH_PAGES makes the cold rows' readers take a
// fresh buffer per page (the SDK's default) instead of ReuseBuffers.
func freshPages() bool { return os.Getenv("PICOMQ_BENCH_FRESH_PAGES") != "" }

// pretouchNodes has the nodes the object rows start touch their read
// cache's GET buffers at start (--cache-pretouch, by its environment twin,
// which a binary from before the flag ignores, so before/after runs use
// one harness), as an operator does for nodes that serve history after a
// restart or takeover; PICOMQ_BENCH_NO_PRETOUCH leaves it off. The
// returned func undoes it.
func pretouchNodes() func() {
	if os.Getenv("PICOMQ_BENCH_NO_PRETOUCH") != "" {
		return func() {}
	}
	os.Setenv("PICOMQ_CACHE_PRETOUCH", "true")
	return func() { os.Unsetenv("PICOMQ_CACHE_PRETOUCH") }
}
