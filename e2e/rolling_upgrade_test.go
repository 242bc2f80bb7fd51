package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// freeRange returns a base port such that base+1 … base+n are all free a
// moment ago (deploy/local-cluster.sh numbers its ports from bases). It
// searches below Linux's ephemeral range (32768+), so that outgoing
// connections of other processes do not take the ports between the check
// and the cluster's start.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for tries := 0; tries < 500; tries++ {
		base := 20000 + rand.IntN(12000-n)
		ok := true
		for p := base + 1; p <= base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// TestLocalClusterRollingUpgrade is the rolling upgrade of docs/operations.md
// on deploy/local-cluster.sh's three nodes (real etcd, real MinIO):
// `local-cluster.sh upgrade BIN` drains, stops and restarts each node in
// turn on another binary while idempotent producers append through random
// nodes. Every acknowledged record is read back at its offset afterwards,
// producers only ever retried 503s and broken connections (any other
// answer fails the test), and every node ends up serving from the new
// binary. The binaries are the script's own build and the e2e build of the
// same tree: the drill proves the procedure; which versions may be mixed
// is written in operations.md.
func TestLocalClusterRollingUpgrade(t *testing.T) {
	minioBinary(t) // fails, never skips, without MinIO
	dir := t.TempDir()
	// One free block: nodes r+1..r+3, Kafka r+5..r+7, etcd r+9..r+10, MinIO r+12..r+13.
	r := freeRange(t, 13)
	base, kafka, etcdPort, minioPort := r, r+4, r+9, r+12
	env := append(os.Environ(), "PICOMQ_CLUSTER_DIR="+dir, "PICOMQ_CLUSTER_PORT="+strconv.Itoa(base),
		"PICOMQ_CLUSTER_KAFKA_PORT="+strconv.Itoa(kafka), "PICOMQ_CLUSTER_ETCD_PORT="+strconv.Itoa(etcdPort),
		"PICOMQ_CLUSTER_MINIO_PORT="+strconv.Itoa(minioPort), "PICOMQ_CLUSTER_LEASE_TTL=3s", "PICOMQ_CLUSTER_SEAL_MAX_AGE=200ms")
	script := filepath.Join("..", "deploy", "local-cluster.sh")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			logs, _ := exec.Command("bash", "-c", "tail -n 30 "+filepath.Join(dir, "logs")+"/*.log").CombinedOutput()
			t.Fatalf("local-cluster.sh %v: %v\n%s\n%s", args, err, out, logs)
		}
		return string(out)
	}
	run("up")
	t.Cleanup(func() {
		cmd := exec.Command("bash", script, "down")
		cmd.Env = env
		_ = cmd.Run()
	})
	urls := make([]string, 3)
	for i := range urls {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", base+1+i)
	}

	const nStreams = 6
	streams := make([]*idemStream, nStreams)
	for i := range streams {
		s := &idemStream{name: fmt.Sprintf("/upgrade/s%d", i), producerID: fmt.Sprintf("e2e-upgrade-%d", i), durability: "local"}
		streams[i] = s
		wantStatus(t, mustSend(t, noRedirect, "PUT", urls[i%3]+s.name, nil, "Content-Type", "text/plain").response, 201, "create "+s.name)
	}
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		errs    errorList
		retries atomic.Int64
	)
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; !stop.Load(); seq++ {
				v := fmt.Sprintf("%s#%d", s.name, seq)
				hdr := []string{"Content-Type", "text/plain", hdrProducerID, s.producerID, hdrProducerEpoch, "0", hdrProducerSeq, strconv.Itoa(seq)}
				deadline := time.Now().Add(90 * time.Second)
				for attempt := 0; ; attempt++ {
					via := urls[(i+seq+attempt)%3]
					r, err := send(context.Background(), follow, "POST", via+s.name, []byte(v), hdr...)
					if err == nil && r.Status == 200 {
						off, perr := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
						if perr != nil {
							errs.add("%s seq %d: ack without Pico-Offset", s.name, seq)
							return
						}
						s.mu.Lock()
						s.acks = append(s.acks, ack{Offset: off, Value: v, At: time.Now(), ServedBy: r.servedBy()})
						s.mu.Unlock()
						break
					}
					if err == nil && r.Status != 503 {
						errs.add("%s seq %d via %s: status %d %s (only 503s may be retried)", s.name, seq, via, r.Status, strings.TrimSpace(string(r.Body)))
						return
					}
					retries.Add(1)
					if time.Now().After(deadline) {
						errs.add("%s seq %d: not acknowledged within 90s (last error %v)", s.name, seq, err)
						return
					}
					time.Sleep(retryBackoff)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	// A Kafka producer and a consumer group on a 3-partition topic.
	seeds := []string{fmt.Sprintf("127.0.0.1:%d", kafka+1), fmt.Sprintf("127.0.0.1:%d", kafka+2), fmt.Sprintf("127.0.0.1:%d", kafka+3)}
	kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer kcancel()
	createTopic(t, kctx, seeds[0], "upgrade", 3)
	kg := startUpgradeGroup(t, kctx, seeds, "upgrade", "upgrade-group")

	// Let the producers get going, then upgrade every node.
	if !pollUntil(30*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range streams {
			s.mu.Lock()
			n := len(s.acks)
			s.mu.Unlock()
			if n < 5 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("producers did not start")
	}
	out := run("upgrade", picomqBin)
	t.Logf("upgrade:\n%s", out)
	// A few more acknowledgements on the upgraded cluster, then stop.
	marks := make([]int, nStreams)
	for i, s := range streams {
		s.mu.Lock()
		marks[i] = len(s.acks)
		s.mu.Unlock()
	}
	if !pollUntil(30*time.Second, 20*time.Millisecond, func() bool {
		for i, s := range streams {
			s.mu.Lock()
			n := len(s.acks)
			s.mu.Unlock()
			if n < marks[i]+5 {
				return false
			}
		}
		return true
	}) {
		t.Error("producers made no progress after the upgrade")
	}
	stop.Store(true)
	wg.Wait()
	errs.check(t, "producers during the rolling upgrade")
	kg.finish(t)

	total := 0
	for _, s := range streams {
		recs := mustReadStream(t, urls[0], s.name)
		byOffset := map[int64]string{}
		for _, r := range recs {
			byOffset[r.Offset] = r.Value
		}
		for _, a := range s.acks {
			total++
			if byOffset[a.Offset] != a.Value {
				t.Errorf("%s: acknowledged %q at offset %d, read back %q", s.name, a.Value, a.Offset, byOffset[a.Offset])
			}
		}
	}
	t.Logf("%d acknowledged records, all read back; %d retries (503 or connection) during the upgrade", total, retries.Load())

	// Every node runs the new binary now (the pid file names it).
	f, err := os.Open(filepath.Join(dir, "cluster.pids"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	upgraded := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && strings.HasPrefix(fields[2], "node-") {
			if fields[1] != picomqBin {
				t.Errorf("%s runs %s after the upgrade", fields[2], fields[1])
			}
			upgraded++
		}
	}
	if upgraded != 3 {
		t.Errorf("%d nodes in the pid file after the upgrade, want 3", upgraded)
	}
}

// upgradeGroup is a franz-go producer and group consumer running through
// the rolling upgrade: every record the producer got acknowledged must be
// consumed (at least once), and the group may rebalance only a few times
// per restarted node, not continuously (a rebalance storm).
type upgradeGroup struct {
	stop     atomic.Bool
	produced atomic.Bool // the producer has returned: acked is final
	done     chan struct{}
	mu       sync.Mutex
	acked    map[string]bool
	consumed map[string]bool
	assigns  atomic.Int64
	errs     errorList
}

func startUpgradeGroup(t *testing.T, ctx context.Context, seeds []string, topic, group string) *upgradeGroup {
	g := &upgradeGroup{done: make(chan struct{}), acked: map[string]bool{}, consumed: map[string]bool{}}
	prod := kafkaClient(t, kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(60*time.Second))
	cons := kafkaClient(t, kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10*time.Second), kgo.FetchMaxWait(time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { g.assigns.Add(1) }))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer g.produced.Store(true)
		defer prod.Close()
		for i := 0; !g.stop.Load(); i++ {
			v := fmt.Sprintf("k#%d", i)
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
				if ctx.Err() == nil {
					g.errs.add("kafka produce %s: %v (after the client's own retries)", v, err)
				}
				return
			}
			g.mu.Lock()
			g.acked[v] = true
			g.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		defer cons.Close()
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cons.PollRecords(pctx, 500)
			cancel()
			recs := fs.Records()
			g.mu.Lock()
			for _, r := range recs {
				g.consumed[string(r.Value)] = true
			}
			all := g.produced.Load() && g.coveredLocked()
			g.mu.Unlock()
			if len(recs) > 0 {
				_ = cons.CommitRecords(ctx, recs...) // a failed commit redelivers: at least once
			}
			if all {
				return
			}
		}
	}()
	go func() { wg.Wait(); close(g.done) }()
	return g
}

func (g *upgradeGroup) coveredLocked() bool {
	for v := range g.acked {
		if !g.consumed[v] {
			return false
		}
	}
	return true
}

// finish stops producing and waits until the group consumed every
// acknowledged record.
func (g *upgradeGroup) finish(t *testing.T) {
	t.Helper()
	g.stop.Store(true)
	select {
	case <-g.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the Kafka group did not consume every acknowledged record within 3 minutes of the upgrade")
	}
	g.errs.check(t, "Kafka producer")
	g.mu.Lock()
	defer g.mu.Unlock()
	missing := 0
	for v := range g.acked {
		if !g.consumed[v] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("the Kafka group missed %d of %d acknowledged records", missing, len(g.acked))
	}
	// One assignment at the start, then at most a few per restarted node
	// (the coordinator moves, members rejoin): a storm is many more.
	if n := g.assigns.Load(); n > 1+3*3 {
		t.Errorf("the group was assigned partitions %d times during a 3-node upgrade: a rebalance storm", n)
	}
	t.Logf("Kafka: %d records acknowledged, all consumed; %d partition assignments", len(g.acked), g.assigns.Load())
}
