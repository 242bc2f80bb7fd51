package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// BenchmarkKafka measures Kafka produce (franz-go, 1 KiB records, acks=all,
// idempotent, batches of 100 records per ProduceSync) with 1 and 8
// producers over 1- and 16-partition topics, next to Pico binary-batch
// appends of the same batches over the same number of connections and the
// WAL alone with the same entries, all in one run on one disk; then one
// franz-go consumer reading each topic back. MB/s counts record values.
// PICOMQ_BENCH_KAFKA_PEER=host:port drives the same producer load against
// another Kafka broker after each cell (a peer such as klite, built and
// started outside this repository) and prints PicoMQ's ratio to it.
func BenchmarkKafka(b *testing.B) {
	d := measureFor()
	kafkaAddr, err := testproc.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	// PICOMQ_BENCH_PPROF=127.0.0.1:PORT serves the node's Go profiles
	// (go tool pprof http://…/debug/pprof/profile) during the run.
	// PICOMQ_BENCH_NODE_FLAGS adds serve flags (space separated), to see
	// what a setting costs (e.g. --seal-max-bytes: how often the node
	// flushes to object storage while it takes appends).
	// PICOMQ_BENCH_SIDE_DIR=dir puts the node's embedded etcd and its
	// (file://) object store in dir instead of the data dir, e.g. on a
	// tmpfs, so that only the WAL writes to the disk: it separates the
	// WAL's fdatasyncs from the disk traffic of the flush and of etcd.
	dataDir := benchDir(b)
	flags := []string{"--kafka-addr", kafkaAddr, "--pprof-addr", os.Getenv("PICOMQ_BENCH_PPROF")}
	if side := os.Getenv("PICOMQ_BENCH_SIDE_DIR"); side != "" {
		dir, err := os.MkdirTemp(side, "picobench-side-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Mkdir(filepath.Join(dir, "etcd"), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "etcd"), filepath.Join(dataDir, "etcd")); err != nil {
			b.Fatal(err)
		}
		flags = append(flags, "--object-store", "file://"+filepath.Join(dir, "objects"))
	}
	n := startNodeIn(b, dataDir, append(flags, strings.Fields(os.Getenv("PICOMQ_BENCH_NODE_FLAGS"))...)...)
	ctx := context.Background()
	admin, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	const size = 1024
	val := bytes.Repeat([]byte{'v'}, size)

	fmt.Printf("\nKafka produce (franz-go, acks=all, idempotent, %d x 1 KiB per batch) vs Pico binary batch vs WAL alone, %s each\n", batchRecords, d)
	fmt.Printf("%5s %5s | %11s %8s %9s %9s | %11s %8s %9s | %11s %8s %9s | %8s %8s | %11s %8s\n",
		"parts", "prods", "Kafka rec/s", "MB/s", "p50", "p99", "Pico rec/s", "MB/s", "p99", "WAL rec/s", "MB/s", "p99", "K/Pico", "K/WAL", "consume r/s", "MB/s")
	for _, parts := range []int32{1, 16} {
		for _, prods := range []int{1, 8} {
			if !benchShape(parts, prods) {
				continue
			}
			topic := fmt.Sprintf("bench-p%d-c%d", parts, prods)
			walBefore := scrapeWAL(b, n.url)
			kafka := kafkaProduce(b, admin, kafkaAddr, topic, parts, prods, val, d)
			walKafka := scrapeWAL(b, n.url).minus(walBefore)

			// Pico binary batches of the same records over prods connections.
			name := "/" + topic + "-pico"
			mustCreate(b, n.url+name)
			body, ct := appendBody("batch", batchRecords, size)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: prods, MaxConnsPerHost: prods}}
			pico, err := drive(prods, d, appendOp(hc, n.url+name, body, ct, batchRecords, size))
			if err != nil {
				b.Fatal(err)
			}
			hc.CloseIdleConnections()
			walRes := walCeiling(b, prods, batchRecords, size, d)

			// Consume everything produced to the topic with one client.
			cons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			var got, gotBytes int64
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			for got < kafka.records && cctx.Err() == nil {
				fs := cons.PollFetches(cctx)
				fs.EachRecord(func(r *kgo.Record) { got++; gotBytes += int64(len(r.Value)) })
			}
			cancel()
			cons.Close()
			consumeSecs := time.Since(start).Seconds()
			if got < kafka.records {
				b.Fatalf("%s: consumed %d of %d records", topic, got, kafka.records)
			}
			fmt.Printf("%5d %5d | %11.0f %8.1f %9s %9s | %11.0f %8.1f %9s | %11.0f %8.1f %9s | %7.2fx %7.0f%% | %11.0f %8.1f\n",
				parts, prods, kafka.recordsPerSec(), kafka.mbPerSec(), kafka.pct(0.5).Round(time.Microsecond), kafka.pct(0.99).Round(time.Microsecond),
				pico.recordsPerSec(), pico.mbPerSec(), pico.pct(0.99).Round(time.Microsecond),
				walRes.recordsPerSec(), walRes.mbPerSec(), walRes.pct(0.99).Round(time.Microsecond),
				kafka.recordsPerSec()/pico.recordsPerSec(), 100*kafka.mbPerSec()/walRes.mbPerSec(),
				float64(got)/consumeSecs, float64(gotBytes)/consumeSecs/1e6)
			fmt.Printf("%13s during Kafka produce: %.1f WAL entries per ProduceSync, %.1f per commit group, fdatasync %.1f ms each (WAL alone %.1f ms), busy %.0f%% of the time, %d flushes, node CPU %.0f%% of one core\n",
				"", walKafka.entries/float64(kafka.requests), walKafka.entries/walKafka.groups,
				1000*walKafka.syncSeconds/walKafka.groups, 1000*walRes.syncSeconds/float64(walRes.syncs),
				100*walKafka.syncSeconds/kafka.elapsed.Seconds(), int(walKafka.flushes), 100*walKafka.cpuSeconds/kafka.elapsed.Seconds())
			fmt.Printf("%13s offset reservations: %d etcd txns, %d appends waited for one (%.1f ms each, %.1f%% of ProduceSyncs)\n",
				"", int(walKafka.resTxns), int(walKafka.resWaits), 1000*walKafka.resWaitSeconds/max(walKafka.resWaits, 1),
				100*walKafka.resWaits/float64(kafka.requests))
			if peer := os.Getenv("PICOMQ_BENCH_KAFKA_PEER"); peer != "" {
				// A topic of its own per run: the peer outlives the run.
				peerTopic := fmt.Sprintf("%s-%d", topic, time.Now().UnixNano())
				pr := kafkaProduce(b, nil, peer, peerTopic, parts, prods, val, d)
				fmt.Printf("%13s peer broker %s, same load: %.0f rec/s, p50 %s, p99 %s; PicoMQ/peer %.2fx\n", "", peer,
					pr.recordsPerSec(), pr.pct(0.5).Round(time.Microsecond), pr.pct(0.99).Round(time.Microsecond),
					kafka.recordsPerSec()/pr.recordsPerSec())
			}
			b.ReportMetric(100*kafka.mbPerSec()/walRes.mbPerSec(), fmt.Sprintf("pct-of-wal-p%d-c%d", parts, prods))
		}
	}
}

// benchShape says whether the partitions x producers cell runs:
// PICOMQ_BENCH_KAFKA_SHAPES lists the cells to run ("1x8,16x8"), all by
// default, so one cell can be profiled or repeated alone.
func benchShape(parts int32, prods int) bool {
	list := os.Getenv("PICOMQ_BENCH_KAFKA_SHAPES")
	return list == "" || slices.Contains(strings.Split(list, ","), fmt.Sprintf("%dx%d", parts, prods))
}

// walCounters are the node's WAL and flush counters from /metrics.
type walCounters struct {
	entries, groups, syncSeconds, flushes float64
	resTxns, resWaits, resWaitSeconds     float64
	cpuSeconds                            float64 // the node process's user+system CPU
}

func (c walCounters) minus(o walCounters) walCounters {
	return walCounters{c.entries - o.entries, c.groups - o.groups, c.syncSeconds - o.syncSeconds, c.flushes - o.flushes,
		c.resTxns - o.resTxns, c.resWaits - o.resWaits, c.resWaitSeconds - o.resWaitSeconds, c.cpuSeconds - o.cpuSeconds}
}

// scrapeWAL reads the WAL counters of the node at url, so a cell can say how
// well its appends were grouped into commits.
func scrapeWAL(b *testing.B, url string) walCounters {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var c walCounters
	fields := map[string]*float64{
		"picomq_wal_entries_total":                     &c.entries,
		"picomq_wal_commit_groups_total":               &c.groups,
		"picomq_wal_sync_seconds_total":                &c.syncSeconds,
		"picomq_flushes_total":                         &c.flushes,
		"picomq_offset_reservation_txns_total":         &c.resTxns,
		"picomq_offset_reservation_waits_total":        &c.resWaits,
		"picomq_offset_reservation_wait_seconds_total": &c.resWaitSeconds,
		"process_cpu_seconds_total":                    &c.cpuSeconds,
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, val, _ := strings.Cut(line, " ")
		field := fields[name]
		if field == nil {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			*field = f
		}
	}
	return c
}

// kafkaProduce creates topic with parts partitions on the broker at addr
// and drives prods franz-go producers (acks=all, idempotent, no
// compression), each a closed loop of ProduceSync of batchRecords records
// of val, for d. admin may be nil (a client for addr is made).
func kafkaProduce(b *testing.B, admin *kgo.Client, addr, topic string, parts int32, prods int, val []byte, d time.Duration) result {
	ctx := context.Background()
	if admin == nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		admin = cl
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		b.Fatalf("create %s at %s: %v %+v", topic, addr, err, resp)
	}
	clients := make([]*kgo.Client, prods)
	for i := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProducerBatchMaxBytes(4<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		clients[i] = cl
	}
	op := produceSyncOp(clients, val)
	if n, _ := strconv.Atoi(os.Getenv("PICOMQ_BENCH_KAFKA_INFLIGHT")); n > 1 {
		op = produceWindowOp(clients, val, n)
	}
	res, err := drive(prods, d, op)
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// produceSyncOp is one closed-loop ProduceSync of batchRecords records per
// call: one request in flight per producer.
func produceSyncOp(clients []*kgo.Client, val []byte) func(w int) (int64, int64, error) {
	recs := make([][]*kgo.Record, len(clients))
	return func(w int) (int64, int64, error) {
		if recs[w] == nil {
			recs[w] = make([]*kgo.Record, batchRecords)
		}
		for i := range recs[w] {
			recs[w][i] = &kgo.Record{Value: val}
		}
		err := clients[w].ProduceSync(context.Background(), recs[w]...).FirstErr()
		return batchRecords, int64(batchRecords * len(val)), err
	}
}

// produceWindowOp (PICOMQ_BENCH_KAFKA_INFLIGHT=n) hands batchRecords
// records per call to the client's asynchronous Produce and waits only for
// the group handed over n calls earlier, so a producer keeps n groups
// outstanding and franz-go pipelines produce requests on its connection (up
// to 5 in flight with idempotence), as an application that does not wait
// per batch does. Latencies are then per call, not per produce; the last
// n-1 groups of a run are counted without being awaited.
func produceWindowOp(clients []*kgo.Client, val []byte, n int) func(w int) (int64, int64, error) {
	type group struct {
		wg  sync.WaitGroup
		err atomic.Pointer[error]
	}
	outstanding := make([][]*group, len(clients))
	return func(w int) (int64, int64, error) {
		g := new(group)
		g.wg.Add(batchRecords)
		done := func(_ *kgo.Record, err error) {
			if err != nil {
				g.err.CompareAndSwap(nil, &err)
			}
			g.wg.Done()
		}
		for range batchRecords {
			clients[w].Produce(context.Background(), &kgo.Record{Value: val}, done)
		}
		outstanding[w] = append(outstanding[w], g)
		if len(outstanding[w]) >= n {
			old := outstanding[w][0]
			outstanding[w] = outstanding[w][1:]
			old.wg.Wait()
			if e := old.err.Load(); e != nil {
				return 0, 0, *e
			}
		}
		return batchRecords, int64(batchRecords * len(val)), nil
	}
}
