package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterTxnCoordinatorKill: 3 nodes (real etcd and MinIO,
// `object` durability), a 6-partition topic led by all three nodes, a
// franz-go transactional producer. One transaction is committed; a second
// one writes to every partition and, before it ends, the node coordinating
// the transactional id is killed with -9. The client then tries to commit.
// Whatever happens (the node that takes the coordinator's state over
// completes the client's retried commit, or the transaction times out and
// is aborted), a read_committed consumer must see every record of the
// committed transaction and either all or none of the open one's, and
// HTTP readers of the partitions the same.
func TestKafkaClusterTxnCoordinatorKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true, Extra: []string{"--durability", "object"}})
	seeds := c.kafkaSeeds()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	const topic, parts, txnID = "txkill", 6, "txkill-producer"
	createSpreadTopic(t, c, topic, parts)
	admin := kafkaClient(t, kgo.SeedBrokers(seeds...))
	if owners := distinct(partitionLeaders(t, ctx, admin, topic)); owners != 3 {
		t.Fatalf("partitions are led by %d brokers, want 3", owners)
	}

	p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(topic),
		kgo.TransactionTimeout(20*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	write := func(prefix string) {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 * parts {
			r := &kgo.Record{Partition: int32(i % parts), Value: []byte(fmt.Sprintf("%s-%02d", prefix, i))}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", r.Value, err)
			}
		}
	}
	write("committed")
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	write("open")
	victim, err := txnCoordinator(ctx, c, admin, txnID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing %s (the transaction coordinator) with a transaction open on all %d partitions", victim.ID, parts)
	victim.Kill()
	commitErr := p.EndTransaction(ctx, kgo.TryCommit)
	t.Logf("the client's commit after the kill: %v", commitErr)

	// The transaction ends by itself within its timeout either way: wait
	// until no partition holds anything unstable.
	var live []string
	for _, n := range c.nodes {
		if n != victim {
			live = append(live, n.KafkaAddr)
		}
	}
	reader := kafkaClient(t, kgo.SeedBrokers(live...))
	if !pollUntil(2*time.Minute, 250*time.Millisecond, func() bool { return stable(ctx, reader, topic, parts) }) {
		t.Fatal("the open transaction never ended (LSO below the high watermark)")
	}
	got := readCommitted(t, ctx, live, topic, 4*parts)
	var committed, open []string
	for _, v := range got {
		if strings.HasPrefix(v, "committed-") {
			committed = append(committed, v)
		} else {
			open = append(open, v)
		}
	}
	if len(committed) != 2*parts {
		t.Fatalf("read_committed: %d records of the committed transaction, want %d: %v", len(committed), 2*parts, got)
	}
	if len(open) != 0 && len(open) != 2*parts {
		t.Fatalf("read_committed: the interrupted transaction is half visible (%d of %d records): %v", len(open), 2*parts, got)
	}
	if commitErr == nil && len(open) == 0 {
		t.Fatal("the client's commit succeeded but its records are not visible")
	}
	t.Logf("interrupted transaction: %s", map[bool]string{true: "committed (the client's retry)", false: "aborted"}[len(open) > 0])

	// HTTP readers of every partition see the same committed records.
	var httpVals []string
	for part := range parts {
		name := "/" + topic
		if part > 0 {
			name += "/" + strconv.Itoa(part)
		}
		for _, r := range mustReadStreamFrom(t, c.nodes[(indexOf(c, victim)+1)%3].URL, name, true) {
			httpVals = append(httpVals, r.Value)
		}
	}
	sort.Strings(httpVals)
	if fmt.Sprint(httpVals) != fmt.Sprint(got) {
		t.Fatalf("HTTP readers see %v, read_committed Kafka readers %v", httpVals, got)
	}
}

func indexOf(c *cluster, n *clusterNode) int {
	for i, m := range c.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// txnCoordinator maps FindCoordinator (key type 1) for id to its node.
func txnCoordinator(ctx context.Context, c *cluster, cl *kgo.Client, id string) (*clusterNode, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1
	req.CoordinatorKey, req.CoordinatorKeys = id, []string{id}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	host, port, ec := resp.Host, resp.Port, resp.ErrorCode
	if len(resp.Coordinators) > 0 {
		host, port, ec = resp.Coordinators[0].Host, resp.Coordinators[0].Port, resp.Coordinators[0].ErrorCode
	}
	if ec != 0 {
		return nil, kerr.ErrorForCode(ec)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	for _, n := range c.nodes {
		if n.KafkaAddr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("coordinator %s is none of the nodes", addr)
}

// stable reports whether every partition's last stable offset is its high
// watermark (a read_committed ListOffsets at the end equals a
// read_uncommitted one).
func stable(ctx context.Context, cl *kgo.Client, topic string, parts int) bool {
	end := func(iso int8) map[int32]int64 {
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = iso
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = int32(p), -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl)
		if err != nil {
			return nil
		}
		out := map[int32]int64{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					out[p.Partition] = p.Offset
				}
			}
		}
		return out
	}
	committed, all := end(1), end(0)
	if len(committed) != parts || len(all) != parts {
		return false
	}
	for p, off := range all {
		if committed[p] != off {
			return false
		}
	}
	return true
}

// readCommitted consumes topic from the start with read_committed until at
// least want records or 10 s without new ones.
func readCommitted(t *testing.T, ctx context.Context, seeds []string, topic string, want int) []string {
	t.Helper()
	cl := kafkaClient(t, kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	var got []string
	last := time.Now()
	for time.Since(last) < 10*time.Second && len(got) < want {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)); last = time.Now() })
	}
	// Anything beyond want would be a duplicate or stray: read a little more.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	cancel()
	sort.Strings(got)
	return got
}
