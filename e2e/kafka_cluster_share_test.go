package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterShareStartOffset: 3 nodes (real etcd and MinIO, `object`
// durability), a one-partition topic, and a share group coordinated by
// another node than the partition's. A franz-go share consumer accepts the
// 20 records; the share-partition start offset (SPSO) reaches the
// coordinator's offsets stream (DescribeShareGroupOffsets there says 20).
// The partition's node is killed with -9, the partition moves to a
// survivor, 5 more records are produced, and a new share consumer gets
// exactly those 5: the accepted ones are not delivered again (the group's
// share.auto.offset.reset is earliest, so a lost SPSO would redeliver them).
// Before the SPSO was sent to the coordinator, the stored offset stayed -1
// and the new consumer got all 25 records.
func TestKafkaClusterShareStartOffset(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	shareStartOffset(t, startCluster(t, 3, clusterOpts{Kafka: true, Extra: []string{"--durability", "object"}}))
}

// TestKafkaClusterShareStartOffsetSASL is the same on listeners that
// require SASL: the SPSO travels as the internal SCRAM user.
func TestKafkaClusterShareStartOffsetSASL(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	tokens := writeTokenFile(t, filepath.Join(t.TempDir(), "tokens.yaml"), matrixTokens...)
	shareStartOffset(t, startCluster(t, 3, clusterOpts{Kafka: true, Token: rootToken,
		Extra: []string{"--durability", "object", "--auth-tokens", tokens}}), plainSASL(rootToken))
}

func shareStartOffset(t *testing.T, c *cluster, opts ...kgo.Opt) {
	seeds := c.kafkaSeeds()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	const topic = "spso"
	admin := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %v %+v", topic, err, resp)
	}
	md := metadataAt(t, ctx, seeds[0], topic, opts...)
	brokers := map[int32]string{}
	for _, b := range md.Brokers {
		brokers[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata of %s: %+v", topic, md.Topics)
	}
	var victim *clusterNode
	for _, n := range c.nodes {
		if brokerIDOf(brokers, n) == md.Topics[0].Partitions[0].Leader {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("partition 0 of %s led by %d, none of the nodes %v", topic, md.Topics[0].Partitions[0].Leader, brokers)
	}
	var group string
	var coord *clusterNode
	for i := 0; i < 64 && coord == nil; i++ {
		g := fmt.Sprintf("spso-group-%d", i)
		if n := coordinatorNode(t, ctx, c, admin, g); n != victim {
			group, coord = g, n
		}
	}
	if coord == nil {
		t.Fatal("no group name coordinated by another node than the partition's")
	}
	t.Logf("partition on %s, group %s coordinated by %s", victim.ID, group, coord.ID)
	// Group configs are per node: earliest on each, so that a node
	// without the stored SPSO would start from the log's start.
	for _, n := range c.nodes {
		setShareConfig(t, ctx, n.KafkaAddr, group, "share.auto.offset.reset", "earliest", opts...)
	}

	produceValues(t, ctx, seeds, topic, "a", 20, opts...)
	if got := shareConsumeAll(t, ctx, seeds, group, topic, 20, opts...); len(got) != 20 {
		t.Fatalf("first share consumer got %d records, want 20: %v", len(got), got)
	}
	var stored int64 = -2
	if !pollUntil(time.Minute, 200*time.Millisecond, func() bool {
		stored = storedShareOffset(ctx, coord.KafkaAddr, group, topic, opts...)
		return stored == 20
	}) {
		t.Fatalf("stored start offset on the coordinator %s: %d, want 20 (the partition's node did not store it there)", coord.ID, stored)
	}

	t.Logf("killing %s (the partition's node)", victim.ID)
	victim.Kill()
	var survivors []string
	for _, n := range c.nodes {
		if n != victim {
			survivors = append(survivors, n.KafkaAddr)
		}
	}
	produceValues(t, ctx, survivors, topic, "b", 5, opts...)
	got := shareConsumeAll(t, ctx, survivors, group, topic, 5, opts...)
	if fmt.Sprint(got) != "[b0 b1 b2 b3 b4]" {
		t.Fatalf("share consumer after the kill got %v, want only [b0 b1 b2 b3 b4] (accepted records delivered again)", got)
	}
}

// setShareConfig sets a share group config on the node at addr.
func setShareConfig(t *testing.T, ctx context.Context, addr, group, name, value string, opts ...kgo.Opt) {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cf := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cf.Name, cf.Value = name, kmsg.StringPtr(value)
	res.Configs = append(res.Configs, cf)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("alter group configs at %s: %v", addr, err)
	}
}

// produceValues produces prefix0..prefix(n-1) to partition 0 of topic,
// each acknowledged (the client retries through a leader change).
func produceValues(t *testing.T, ctx context.Context, seeds []string, topic, prefix string, n int, opts ...kgo.Opt) {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(prefix + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce %s%d: %v", prefix, i, err)
		}
	}
}

// shareConsumeAll polls a share consumer of group until it got want
// records and then three polls came back empty (bounded to 3 minutes),
// accepting every record; it returns the values sorted.
func shareConsumeAll(t *testing.T, ctx context.Context, seeds []string, group, topic string, want int, opts ...kgo.Opt) []string {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ShareGroup(group), kgo.FetchMaxWait(500 * time.Millisecond)}, opts...)...)
	defer cl.Close()
	var got []string
	empty := 0
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) && (len(got) < want || empty < 3) {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
			r.Ack(kgo.AckAccept)
			n++
		})
		if n == 0 {
			empty++
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := cl.FlushAcks(fctx); err != nil {
			t.Logf("flush acks: %v", err)
		}
		cancel()
	}
	sort.Strings(got)
	return got
}

// storedShareOffset asks the node at addr (the group's coordinator) for
// the share group's start offset of partition 0 of topic: -1 when none,
// -2 on an error.
func storedShareOffset(ctx context.Context, addr, group, topic string, opts ...kgo.Opt) int64 {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		return -2
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	rg.Topics = []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{rt}
	req.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{rg}
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 ||
		len(resp.Groups[0].Topics) != 1 || len(resp.Groups[0].Topics[0].Partitions) != 1 {
		return -2
	}
	p := resp.Groups[0].Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return -2
	}
	return p.StartOffset
}
