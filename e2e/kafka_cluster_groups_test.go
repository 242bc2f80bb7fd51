package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterGroupTakeover: 3 nodes (real etcd and MinIO, `object`
// durability), a 16-partition topic whose partition streams are owned by
// all three nodes, a franz-go idempotent producer and a franz-go group
// consumer committing after every poll. The node coordinating the group
// is killed with -9 mid-run. Both clients recover by themselves, and every
// record the producer got acknowledged is consumed exactly once by the
// group, counting a record as consumed when the commit covering it is
// acknowledged: no acknowledged commit is lost when the coordinator moves
// (a lost one would deliver its records again) and nothing acknowledged is
// missed.
func TestKafkaClusterGroupTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true, Extra: []string{"--durability", "object"}})
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, n.KafkaAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// Partition streams on every node: partition p is created on node p%3.
	const topic, parts, group = "takeover", 16, "takeover-group"
	for p := parts - 1; p >= 0; p-- { // partition 0 (with the alias) last
		name, alias := "/"+topic, topic
		if p > 0 {
			name, alias = name+"/"+strconv.Itoa(p), ""
		}
		r := mustSend(t, noRedirect, http.MethodPut, c.nodes[p%3].URL+name, nil,
			"Content-Type", "application/octet-stream", "Pico-Kafka-Topic", alias)
		if r.Status != http.StatusCreated {
			t.Fatalf("create %s on %s: %d %s", name, c.nodes[p%3].ID, r.Status, r.Body)
		}
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	leaders := partitionLeaders(t, ctx, admin, topic)
	if len(leaders) != parts {
		t.Fatalf("topic has %d partitions, want %d", len(leaders), parts)
	}
	if owners := distinct(leaders); owners != 3 {
		t.Fatalf("partitions are led by %d brokers, want 3: %v", owners, leaders)
	}

	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		consumed = map[string]int{}
		produced int
	)
	// Producer: rounds of one record per partition until stopProducing.
	stopProducing := make(chan struct{})
	prodDone := make(chan error, 1)
	go func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			prodDone <- err
			return
		}
		defer cl.Close()
		for round := 0; ; round++ {
			select {
			case <-stopProducing:
				prodDone <- nil
				return
			default:
			}
			recs := make([]*kgo.Record, parts)
			for p := range recs {
				recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(fmt.Sprintf("r%d-p%d", round, p))}
			}
			res := cl.ProduceSync(ctx, recs...)
			mu.Lock()
			for _, r := range res {
				if r.Err == nil {
					acked[string(r.Record.Value)] = true
				}
			}
			produced += len(recs)
			mu.Unlock()
			if ctx.Err() != nil {
				prodDone <- ctx.Err()
				return
			}
		}
	}()

	// Consumer: poll, commit, count on an acknowledged commit. A failed
	// commit (the coordinator died, or the group is rebalancing) leaves
	// the batch uncertain: the consumer starts a new client, asks the
	// committed offsets, counts the records below them (their commit went
	// through after all) and drops the others, which the group delivers
	// again from the committed offsets.
	stopConsuming := make(chan struct{})
	consDone := make(chan error, 1)
	restarts := 0
	go func() {
		newClient := func() (*kgo.Client, error) {
			return kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
				kgo.SessionTimeout(6*time.Second), kgo.FetchMaxWait(time.Second))
		}
		cl, err := newClient()
		if err != nil {
			consDone <- err
			return
		}
		defer func() { cl.Close() }()
		for {
			select {
			case <-stopConsuming:
				consDone <- nil
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollRecords(pctx, 500)
			pcancel()
			if ctx.Err() != nil {
				consDone <- ctx.Err()
				return
			}
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			if err := cl.CommitRecords(ctx, recs...); err == nil {
				mu.Lock()
				for _, r := range recs {
					consumed[string(r.Value)]++
				}
				mu.Unlock()
				continue
			} else {
				t.Logf("commit of %d records failed (%v); restarting the consumer", len(recs), err)
			}
			cl.Close()
			restarts++
			committed, err := committedOffsets(ctx, admin, group, topic)
			if err != nil {
				consDone <- err
				return
			}
			mu.Lock()
			for _, r := range recs {
				if r.Offset < committed[r.Partition] {
					consumed[string(r.Value)]++
				}
			}
			mu.Unlock()
			if cl, err = newClient(); err != nil {
				consDone <- err
				return
			}
		}
	}()

	progress := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return produced, len(consumed)
	}
	if !pollUntil(3*time.Minute, 100*time.Millisecond, func() bool { p, n := progress(); return p >= 400 && n >= 200 }) {
		p, n := progress()
		t.Fatalf("before the kill: %d produced, %d consumed", p, n)
	}
	victim := coordinatorNode(t, ctx, c, admin, group)
	p0, n0 := progress()
	t.Logf("killing %s (the group's coordinator) after %d records produced, %d consumed", victim.ID, p0, n0)
	victim.kill()
	// Both clients carry on by themselves.
	if !pollUntil(4*time.Minute, 100*time.Millisecond, func() bool { p, n := progress(); return p >= p0+800 && n >= n0+800 }) {
		p, n := progress()
		t.Fatalf("after the kill: %d produced, %d consumed (%d and %d at the kill)", p, n, p0, n0)
	}
	close(stopProducing)
	if err := <-prodDone; err != nil {
		t.Fatalf("producer: %v", err)
	}
	// The group consumes every acknowledged record.
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		m := 0
		for v := range acked {
			if consumed[v] == 0 {
				m++
			}
		}
		return m
	}
	if !pollUntil(3*time.Minute, 100*time.Millisecond, func() bool { return missing() == 0 }) {
		t.Fatalf("%d acknowledged records never consumed", missing())
	}
	close(stopConsuming)
	if err := <-consDone; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for v, n := range consumed {
		if n > 1 {
			dups++
			if dups <= 10 {
				t.Errorf("%s consumed %d times", v, n)
			}
		}
	}
	if dups > 0 {
		t.Fatalf("%d records consumed more than once", dups)
	}
	t.Logf("%d records acknowledged, %d consumed exactly once, %d consumer restarts after failed commits; coordinator %s killed",
		len(acked), len(consumed), restarts, victim.ID)
}

// partitionLeaders returns the leader broker of each partition of topic.
func partitionLeaders(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) map[int32]int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata of %s: %v %+v", topic, err, resp)
	}
	out := map[int32]int32{}
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p.Leader
	}
	return out
}

func distinct(m map[int32]int32) int {
	seen := map[int32]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}

// committedOffsets asks the group's coordinator for its committed offsets
// of topic, retrying while the coordinator moves.
func committedOffsets(ctx context.Context, cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	for {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.ErrorCode == 0 {
			out := map[int32]int64{}
			for _, tp := range resp.Topics {
				if tp.Topic != topic {
					continue
				}
				for _, p := range tp.Partitions {
					out[p.Partition] = p.Offset
				}
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("committed offsets: %v (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// coordinatorNode returns the cluster node that coordinates group.
func coordinatorNode(t *testing.T, ctx context.Context, c *cluster, cl *kgo.Client, group string) *clusterNode {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("FindCoordinator: %v", err)
	}
	host, port, ec := resp.Host, resp.Port, resp.ErrorCode
	if len(resp.Coordinators) > 0 {
		host, port, ec = resp.Coordinators[0].Host, resp.Coordinators[0].Port, resp.Coordinators[0].ErrorCode
	}
	if ec != 0 {
		t.Fatalf("FindCoordinator: error %d", ec)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	for _, n := range c.nodes {
		if n.KafkaAddr == addr {
			return n
		}
	}
	t.Fatalf("coordinator %s is none of the nodes", addr)
	return nil
}
