package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaClient is a franz-go client with opts; the caller closes it.
func kafkaClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// createTopic creates topic with n partitions through the Kafka API (opts:
// the client's SASL, if any).
func createTopic(t testing.TB, ctx context.Context, addr, topic string, n int32, opts ...kgo.Opt) {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if ec := resp.Topics[0].ErrorCode; ec != 0 {
		t.Fatalf("create topic %s: error %d %s", topic, ec, strOr(resp.Topics[0].ErrorMessage))
	}
}

func strOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// produceN produces values prefix0..prefix(n-1) round-robin over the
// topic's partitions and waits for every acknowledgement.
func produceN(t testing.TB, ctx context.Context, addr, topic, prefix string, n int) {
	t.Helper()
	cl := kafkaClient(t, kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(prefix + strconv.Itoa(i))}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// consumeGroup consumes topic in group until want records arrived,
// commits them synchronously and leaves the group. It fails on a record
// it did not expect (one consumed and committed before).
func consumeGroup(t testing.TB, ctx context.Context, addr, group, topic string, want map[string]bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // leaves the group
	seen := 0
	for seen < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group %s: %d of %d records consumed: %v", group, seen, len(want), ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		for _, r := range fs.Records() {
			v := string(r.Value)
			if !want[v] {
				t.Fatalf("group %s got %q (partition %d offset %d), which it consumed and committed before or never produced", group, v, r.Partition, r.Offset)
			}
			want[v] = false
			seen++
		}
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func valueSet(prefix string, n int) map[string]bool {
	m := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		m[prefix+strconv.Itoa(i)] = true
	}
	return m
}

// TestKafkaGroupRestart: a group consumer commits, the node is killed
// (-9) and restarted, and the group's next consumer resumes at the
// committed offsets: it gets exactly the records produced afterwards.
func TestKafkaGroupRestart(t *testing.T) {
	dir := t.TempDir()
	node, addr := startKafkaNode(t, filepath.Join(dir, "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	createTopic(t, ctx, addr, "orders", 3)
	produceN(t, ctx, addr, "orders", "a", 90)
	consumeGroup(t, ctx, addr, "billing", "orders", valueSet("a", 90))

	node.Kill()
	node.restart()

	produceN(t, ctx, addr, "orders", "b", 30)
	consumeGroup(t, ctx, addr, "billing", "orders", valueSet("b", 30))

	// The committed offsets are the partitions' ends.
	cl := kafkaClient(t, kgo.SeedBrokers(addr))
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "billing"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch: %v %v", err, resp)
	}
	var total int64
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			total += p.Offset
		}
	}
	if total != 120 {
		t.Fatalf("committed offsets sum to %d, want 120: %+v", total, fmt.Sprint(resp.Topics))
	}
}
