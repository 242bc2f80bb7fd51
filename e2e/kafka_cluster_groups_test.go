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

	"github.com/twmb/franz-go/pkg/kerr"
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
// missed. FindCoordinator names another node after the kill, and the
// committed offsets read there are at least those read before it.
func TestKafkaClusterGroupTakeover(t *testing.T) { groupTakeover(t, false) }

// TestKafkaClusterConsumerProtocolTakeover is TestKafkaClusterGroupTakeover
// with a KIP-848 consumer-protocol consumer (server-side assignment): after
// the coordinator dies the member is unknown to the new one, rejoins with
// a new member id, and resumes at the committed offsets.
func TestKafkaClusterConsumerProtocolTakeover(t *testing.T) { groupTakeover(t, true) }

func groupTakeover(t *testing.T, consumerProtocol bool) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true, Extra: []string{"--durability", "object"}})
	seeds := c.kafkaSeeds()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// Partition streams on every node: partition p is created on node p%3.
	const topic, parts = "takeover", 16
	group := "takeover-group"
	copts := []kgo.Opt{kgo.SessionTimeout(6 * time.Second)}
	if consumerProtocol {
		group = "takeover-group-848"
		copts = []kgo.Opt{kgo.ServerSideBalancer()}
	}
	createSpreadTopic(t, c, topic, parts)
	admin := kafkaClient(t, kgo.SeedBrokers(seeds...))
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
		consumed = map[string]int{}
	)
	prod := startRoundProducer(ctx, seeds, topic, parts)

	// Consumer: one franz-go group client for the whole run, committing
	// after every poll. A polled record is pending until a commit covering
	// it (an offset above it in its partition) is acknowledged; then it
	// counts as consumed. A failed commit (the coordinator died, the group
	// is rebalancing) leaves its records pending: the client rejoins by
	// itself and either redelivers them from the committed offsets or goes
	// on, and the next acknowledged commit covers them. A record counted
	// twice was delivered again after a commit covering it was
	// acknowledged: a lost commit.
	stopConsuming := make(chan struct{})
	consDone := make(chan error, 1)
	failedCommits := 0
	go func() {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.FetchMaxWait(time.Second)}, copts...)...)
		if err != nil {
			consDone <- err
			return
		}
		defer cl.Close()
		pending := map[int32]map[int64]string{} // partition -> offset -> value
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
			for _, r := range recs {
				if pending[r.Partition] == nil {
					pending[r.Partition] = map[int64]string{}
				}
				pending[r.Partition][r.Offset] = string(r.Value)
			}
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				failedCommits++
				t.Logf("commit of %d records failed (%v); the client carries on", len(recs), err)
				continue
			}
			next := map[int32]int64{} // what the acknowledged commit covers
			for _, r := range recs {
				if r.Offset+1 > next[r.Partition] {
					next[r.Partition] = r.Offset + 1
				}
			}
			mu.Lock()
			for p, end := range next {
				for off, v := range pending[p] {
					if off < end {
						consumed[v]++
						delete(pending[p], off)
					}
				}
			}
			mu.Unlock()
		}
	}()

	progress := func() (int, int) {
		produced, _ := prod.counts()
		mu.Lock()
		defer mu.Unlock()
		return produced, len(consumed)
	}

	if !pollUntil(3*time.Minute, 100*time.Millisecond, func() bool { p, n := progress(); return p >= 400 && n >= 200 }) {
		p, n := progress()
		t.Fatalf("before the kill: %d produced, %d consumed", p, n)
	}
	victim := coordinatorNode(t, ctx, c, admin, group)
	before, err := committedOffsets(ctx, seeds, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	p0, n0 := progress()
	t.Logf("killing %s (the group's coordinator) after %d records produced, %d consumed", victim.ID, p0, n0)
	victim.Kill()
	// The group moves to another node.
	var moved *clusterNode
	if !pollUntil(time.Minute, 200*time.Millisecond, func() bool {
		n, err := findCoordinator(ctx, c, admin, group)
		moved = n
		return err == nil && n != nil && n != victim
	}) {
		t.Fatalf("the group's coordinator did not move off %s", victim.ID)
	}
	// Committed offsets survive the move: the new coordinator reports
	// every partition at least where the old one had it.
	after, err := committedOffsets(ctx, seeds, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p, off := range before {
		if after[p] < off {
			t.Fatalf("partition %d: committed offset %d before the kill, %d after", p, off, after[p])
		}
	}
	// Both clients carry on by themselves.
	if !pollUntil(4*time.Minute, 100*time.Millisecond, func() bool { p, n := progress(); return p >= p0+800 && n >= n0+800 }) {
		p, n := progress()
		t.Fatalf("after the kill: %d produced, %d consumed (%d and %d at the kill)", p, n, p0, n0)
	}
	if err := prod.stop(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	// The group consumes every acknowledged record.
	acked := prod.ackedValues()
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		m := 0
		for _, v := range acked {
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
	t.Logf("%d records acknowledged, %d consumed exactly once, %d failed commits; coordinator moved from %s to %s",
		len(acked), len(consumed), failedCommits, victim.ID, moved.ID)
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
// of topic, retrying for up to a minute while the coordinator moves. Every
// attempt uses a new client: franz-go caches a group's coordinator and
// keeps redialling it while it is dead (in our runs for over a minute),
// which is the client's business, not the cluster's.
func committedOffsets(ctx context.Context, seeds []string, group, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		out, err := fetchCommitted(ctx, seeds, group, topic)
		if err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("committed offsets of %s: %v (last: %v)", group, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fetchCommitted is one OffsetFetch attempt of committedOffsets, by a new
// client, bounded to 5 s.
func fetchCommitted(ctx context.Context, seeds []string, group, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
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

// coordinatorNode returns the cluster node that coordinates group.
func coordinatorNode(t *testing.T, ctx context.Context, c *cluster, cl *kgo.Client, group string) *clusterNode {
	t.Helper()
	n, err := findCoordinator(ctx, c, cl, group)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// findCoordinator asks FindCoordinator for group and maps the answer to
// the cluster node listening there.
func findCoordinator(ctx context.Context, c *cluster, cl *kgo.Client, group string) (*clusterNode, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("FindCoordinator: %w", err)
	}
	host, port, ec := resp.Host, resp.Port, resp.ErrorCode
	if len(resp.Coordinators) > 0 {
		host, port, ec = resp.Coordinators[0].Host, resp.Coordinators[0].Port, resp.Coordinators[0].ErrorCode
	}
	if ec != 0 {
		return nil, fmt.Errorf("FindCoordinator: %w", kerr.ErrorForCode(ec))
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	for _, n := range c.nodes {
		if n.KafkaAddr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("coordinator %s is none of the nodes", addr)
}

// createSpreadTopic creates topic's partition streams over HTTP,
// partition p on node p%3, partition 0 (the one holding the alias) last.
func createSpreadTopic(t *testing.T, c *cluster, topic string, parts int) {
	t.Helper()
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
}
