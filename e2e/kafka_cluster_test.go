package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterPresentation: 3 nodes (real etcd and MinIO, `object`
// durability), each advertising its Kafka listener as localhost:<port>.
//   - CreateTopics sent to one node spreads the partitions over all three
//     (each partition is led by the node its stream is handed to), and
//     every node's Metadata lists the same three brokers at their
//     advertised addresses with the same leaders and epochs.
//   - Produce sent to a broker that does not lead the partition is
//     answered NOT_LEADER_OR_FOLLOWER naming the leader, its epoch and
//     its endpoint at Produce v10+ (KIP-951: the client moves at once),
//     and forwarded to the leader at v9 (a client whose metadata is
//     stale after a drain keeps producing); Fetch there gets
//     NOT_LEADER_OR_FOLLOWER.
//   - A franz-go producer keeps producing to every partition while the
//     node leading some of them is killed with -9: it refreshes metadata
//     and goes on by itself, the dead node's partitions get new leaders
//     with a higher epoch, and every acknowledged record is read back.
func TestKafkaClusterPresentation(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true, KafkaHost: "localhost", Extra: []string{"--durability", "object"}})
	seeds := c.kafkaSeeds()
	byAddr := map[string]*clusterNode{}
	for _, n := range c.nodes {
		byAddr[n.KafkaAddr] = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const topic, parts = "spread", 12
	createTopic(t, ctx, c.nodes[0].KafkaAddr, topic, parts)

	// Every node presents the same cluster.
	var leaders map[int32]int32
	var brokers map[int32]string
	epochs := map[int32]int32{}
	for _, n := range c.nodes {
		md := metadataAt(t, ctx, n.KafkaAddr, topic)
		got := map[int32]string{}
		for _, b := range md.Brokers {
			got[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		}
		if len(got) != 3 {
			t.Fatalf("%s lists brokers %v, want the 3 nodes", n.ID, got)
		}
		for id, addr := range got {
			if byAddr[addr] == nil {
				t.Fatalf("%s lists broker %d at %s, which is no node's advertised address %v", n.ID, id, addr, seeds)
			}
		}
		if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 || len(md.Topics[0].Partitions) != parts {
			t.Fatalf("%s: metadata of %s: %+v", n.ID, topic, md.Topics)
		}
		ls := map[int32]int32{}
		for _, p := range md.Topics[0].Partitions {
			ls[p.Partition] = p.Leader
			epochs[p.Partition] = p.LeaderEpoch
		}
		if leaders == nil {
			leaders, brokers = ls, got
			continue
		}
		if fmt.Sprint(ls) != fmt.Sprint(leaders) || fmt.Sprint(got) != fmt.Sprint(brokers) {
			t.Fatalf("%s presents leaders %v brokers %v; %s presented %v %v", n.ID, ls, got, c.nodes[0].ID, leaders, brokers)
		}
	}
	perBroker := map[int32]int{}
	for _, l := range leaders {
		perBroker[l]++
	}
	if len(perBroker) != 3 {
		t.Fatalf("CreateTopics on %s: partitions led by %v, want all 3 brokers", c.nodes[0].ID, perBroker)
	}
	t.Logf("partitions per broker: %v", perBroker)

	// Produce and Fetch at a broker that is not the leader.
	var other *clusterNode
	for id, addr := range brokers {
		if id != leaders[0] {
			other = byAddr[addr]
			break
		}
	}
	hinted := rawProduceRespAt(t, ctx, other.KafkaAddr, topic, 0)
	hp := hinted.Topics[0].Partitions[0]
	if hinted.Version < 10 || hp.ErrorCode != kerr.NotLeaderForPartition.Code || hp.CurrentLeader.LeaderID != leaders[0] || hp.CurrentLeader.LeaderEpoch != epochs[0] {
		t.Fatalf("produce v%d to partition 0 at non-leader %s: %v, current leader %+v; want NOT_LEADER_OR_FOLLOWER naming leader %d at epoch %d",
			hinted.Version, other.ID, kerr.ErrorForCode(hp.ErrorCode), hp.CurrentLeader, leaders[0], epochs[0])
	}
	if len(hinted.Brokers) != 1 || hinted.Brokers[0].NodeID != leaders[0] || net.JoinHostPort(hinted.Brokers[0].Host, strconv.Itoa(int(hinted.Brokers[0].Port))) != brokers[leaders[0]] {
		t.Fatalf("produce at non-leader %s: node endpoints %+v, want only leader %d at %s", other.ID, hinted.Brokers, leaders[0], brokers[leaders[0]])
	}
	if code := rawProduceAt(t, ctx, other.KafkaAddr, topic, 0, produceV9()); code != 0 {
		t.Fatalf("produce v9 to partition 0 at non-leader %s: %v, want it forwarded to the leader", other.ID, kerr.ErrorForCode(code))
	}
	if md := metadataAt(t, ctx, other.KafkaAddr, topic); md.Topics[0].Partitions[0].Leader != leaders[0] {
		t.Fatalf("the forwarded produce moved partition 0: leader %d, was %d", md.Topics[0].Partitions[0].Leader, leaders[0])
	}
	if code := rawFetchAt(t, ctx, other.KafkaAddr, topic, 0); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch of partition 0 at non-leader %s: %v, want NOT_LEADER_OR_FOLLOWER", other.ID, kerr.ErrorForCode(code))
	}

	// A producer across the kill -9 of a leader.
	prod := startRoundProducer(ctx, seeds, topic, parts)
	count := func() int { return len(prod.ackedValues()) }
	if !pollUntil(time.Minute, 50*time.Millisecond, func() bool { return count() >= 10*parts }) {
		t.Fatalf("before the kill: %d records acknowledged", count())
	}
	victimID := leaders[0]
	if victimID == brokerIDOf(brokers, c.nodes[0]) { // keep the node we ask
		victimID = brokerIDOf(brokers, other)
	}
	victim := byAddr[brokers[victimID]]
	var victimParts []int32
	for p, l := range leaders {
		if l == victimID {
			victimParts = append(victimParts, p)
		}
	}
	n0 := count()
	t.Logf("killing %s, leader of partitions %v, after %d acknowledged records", victim.ID, victimParts, n0)
	victim.Kill()
	// The producer goes on for every partition, the dead node's included.
	perPart := func() map[int32]int {
		m := map[int32]int{}
		for _, v := range prod.ackedValues() {
			var r, p int32
			fmt.Sscanf(v, "r%d-p%d", &r, &p)
			m[p]++
		}
		return m
	}
	before := perPart()
	if !pollUntil(3*time.Minute, 100*time.Millisecond, func() bool {
		now := perPart()
		for p := int32(0); p < parts; p++ {
			if now[p] < before[p]+20 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("after the kill: acknowledged per partition %v (%v at the kill)", perPart(), before)
	}
	if err := prod.stop(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	// New leaders for the dead node's partitions, with a higher epoch.
	md := metadataAt(t, ctx, c.nodes[0].KafkaAddr, topic)
	for _, p := range md.Topics[0].Partitions {
		if p.Leader == victimID || p.Leader < 0 {
			t.Fatalf("partition %d still led by %d after the kill of %s", p.Partition, p.Leader, victim.ID)
		}
		if leaders[p.Partition] == victimID && p.LeaderEpoch <= epochs[p.Partition] {
			t.Fatalf("partition %d: leader epoch %d after the takeover, %d before", p.Partition, p.LeaderEpoch, epochs[p.Partition])
		}
	}
	if len(md.Brokers) != 2 {
		t.Fatalf("after the kill, brokers %+v, want the 2 survivors", md.Brokers)
	}
	// Every acknowledged record is there.
	var live []string
	for _, n := range c.nodes {
		if n != victim {
			live = append(live, n.KafkaAddr)
		}
	}
	got := consumeAll(t, ctx, live, topic, parts)
	if !got["misdirected"] {
		t.Error("the produce forwarded from a non-leader was acknowledged but is not in the topic")
	}
	acked := prod.ackedValues()
	for _, v := range acked {
		if !got[v] {
			t.Fatalf("acknowledged record %s not read back (%d acknowledged, %d read)", v, len(acked), len(got))
		}
	}
	produced, failed := prod.counts()
	t.Logf("%d produced, %d acknowledged, %d failed and retried by the test's next round; all acknowledged read back", produced, len(acked), failed)
}

// roundProducer produces rounds of one record per partition, valued
// "r<round>-p<partition>", with a franz-go client until stopped, and
// remembers which records were acknowledged. A failed record is not
// retried as such: the next round writes new ones.
type roundProducer struct {
	quit chan struct{}
	done chan error

	mu       sync.Mutex
	acked    map[string]bool
	produced int
	failed   int
}

func startRoundProducer(ctx context.Context, seeds []string, topic string, parts int) *roundProducer {
	rp := &roundProducer{quit: make(chan struct{}), done: make(chan error, 1), acked: map[string]bool{}}
	go func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			rp.done <- err
			return
		}
		defer cl.Close()
		for round := 0; ; round++ {
			select {
			case <-rp.quit:
				rp.done <- nil
				return
			default:
			}
			recs := make([]*kgo.Record, parts)
			for p := range recs {
				recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(fmt.Sprintf("r%d-p%d", round, p))}
			}
			res := cl.ProduceSync(ctx, recs...)
			rp.mu.Lock()
			for _, r := range res {
				if r.Err == nil {
					rp.acked[string(r.Record.Value)] = true
				} else {
					rp.failed++
				}
			}
			rp.produced += len(recs)
			rp.mu.Unlock()
			if ctx.Err() != nil {
				rp.done <- ctx.Err()
				return
			}
		}
	}()
	return rp
}

// stop ends the rounds and returns the producer's error, if any.
func (rp *roundProducer) stop() error {
	close(rp.quit)
	return <-rp.done
}

// ackedValues is a copy of the acknowledged records' values.
func (rp *roundProducer) ackedValues() []string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	vs := make([]string, 0, len(rp.acked))
	for v := range rp.acked {
		vs = append(vs, v)
	}
	return vs
}

// counts is the number of records sent and of records that failed.
func (rp *roundProducer) counts() (produced, failed int) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.produced, rp.failed
}

func brokerIDOf(brokers map[int32]string, n *clusterNode) int32 {
	for id, addr := range brokers {
		if addr == n.KafkaAddr {
			return id
		}
	}
	return -1
}

// metadataAt asks the broker at addr (and only it) for topic's metadata.
func metadataAt(t *testing.T, ctx context.Context, addr, topic string, opts ...kgo.Opt) *kmsg.MetadataResponse {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0]) // the seed itself
	if err != nil {
		t.Fatalf("metadata at %s: %v", addr, err)
	}
	return resp
}

// rawProduceAt sends one produce of a one-record batch for partition p to
// the broker at addr (the client's opts may cap its version) and returns
// the partition's error code.
func rawProduceAt(t *testing.T, ctx context.Context, addr, topic string, p int32, opts ...kgo.Opt) int16 {
	t.Helper()
	return rawProduceRespAt(t, ctx, addr, topic, p, opts...).Topics[0].Partitions[0].ErrorCode
}

// rawProduceRespAt is rawProduceAt's whole response.
func rawProduceRespAt(t *testing.T, ctx context.Context, addr, topic string, p int32, opts ...kgo.Opt) *kmsg.ProduceResponse {
	t.Helper()
	cl := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	defer cl.Close()
	rec := kmsg.NewRecord()
	rec.Value = []byte("misdirected")
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // < 64: a one-byte varint
	batch := kmsg.NewRecordBatch()
	batch.Magic, batch.NumRecords = 2, 1
	batch.FirstTimestamp, batch.MaxTimestamp = time.Now().UnixMilli(), time.Now().UnixMilli()
	batch.ProducerID, batch.ProducerEpoch, batch.FirstSequence = -1, -1, -1
	batch.Records = rec.AppendTo(nil)
	raw := batch.AppendTo(nil)
	// Length after the length field; CRC-32C over everything after the CRC.
	binary.BigEndian.PutUint32(raw[8:12], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("produce at %s: %v %+v", addr, err, resp)
	}
	return resp
}

// rawFetchAt fetches partition p from offset 0 at the broker at addr and
// returns the partition's error code.
func rawFetchAt(t *testing.T, ctx context.Context, addr, topic string, p int32) int16 {
	t.Helper()
	cl := kafkaClient(t, kgo.SeedBrokers(addr))
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12 // topics by name
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = -1, 100, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.PartitionMaxBytes, rp.LogStartOffset = p, -1, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch at %s: %v %+v", addr, err, resp)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// consumeAll reads every partition of topic from its start to its high
// watermark and returns the values seen (opts: the client's SASL, if any).
func consumeAll(t *testing.T, ctx context.Context, seeds []string, topic string, parts int, opts ...kgo.Opt) map[string]bool {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends := map[int32]int64{}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for p := int32(0); p < int32(parts); p++ {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = p, -1, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	lreq.Topics = append(lreq.Topics, lt)
	if !pollUntil(time.Minute, 200*time.Millisecond, func() bool {
		resp, err := lreq.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 {
			return false
		}
		for _, lp := range resp.Topics[0].Partitions {
			if lp.ErrorCode != 0 {
				return false
			}
			ends[lp.Partition] = lp.Offset
		}
		return len(ends) == parts
	}) {
		t.Fatalf("ListOffsets of %s did not answer for every partition", topic)
	}
	got := map[string]bool{}
	next := map[int32]int64{}
	behind := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return true
			}
		}
		return false
	}
	for behind() {
		if ctx.Err() != nil {
			t.Fatalf("consume %s: %v; at %v of %v", topic, ctx.Err(), next, ends)
		}
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Value)] = true
			if r.Offset+1 > next[r.Partition] {
				next[r.Partition] = r.Offset + 1
			}
		})
	}
	return got
}
