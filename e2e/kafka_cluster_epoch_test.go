package e2e

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaClusterLeaderEpochTakeover: OffsetForLeaderEpoch across a
// takeover on 3 nodes (real etcd and MinIO). Records are produced in the
// partition's first leader epoch, its leader is killed with -9, more
// records are produced in the next epoch; the new leader answers that the
// older epoch ended exactly at the first offset of the newer epoch (past
// any offset gap the takeover left), and the current epoch ends at the
// high watermark.
func TestKafkaClusterLeaderEpochTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true, KafkaHost: "localhost", Extra: []string{"--durability", "object"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "epochs"
	createTopic(t, ctx, c.nodes[0].KafkaAddr, topic, 1)
	leaderOf := func(addr string) (string, int32) {
		md := metadataAt(t, ctx, addr, topic)
		p := md.Topics[0].Partitions[0]
		for _, b := range md.Brokers {
			if b.NodeID == p.Leader {
				return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), p.LeaderEpoch
			}
		}
		t.Fatalf("no broker %d in metadata", p.Leader)
		return "", 0
	}
	leaderAddr, e1 := leaderOf(c.nodes[0].KafkaAddr)

	cl := kafkaClient(t, kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DefaultProduceTopic(topic), kgo.RequestRetries(50))
	defer cl.Close()
	produce := func(n int) (first, last int64) {
		t.Helper()
		first = -1
		for i := range n {
			r, err := cl.ProduceSync(ctx, kgo.StringRecord("v"+strconv.Itoa(i))).First()
			if err != nil {
				t.Fatalf("produce: %v", err)
			}
			if first < 0 {
				first = r.Offset
			}
			last = r.Offset
		}
		return first, last
	}
	_, last1 := produce(5)

	var victim, survivor *clusterNode
	for _, n := range c.nodes {
		if n.KafkaAddr == leaderAddr {
			victim = n
		} else if survivor == nil {
			survivor = n
		}
	}
	if victim == nil {
		t.Fatalf("leader %s is no node", leaderAddr)
	}
	t.Logf("killing %s, leader of %s at epoch %d after offset %d", victim.ID, topic, e1, last1)
	victim.Kill()
	first2, last2 := produce(5)
	newAddr, e2 := leaderOf(survivor.KafkaAddr)
	if e2 <= e1 || newAddr == leaderAddr {
		t.Fatalf("after the kill: leader %s epoch %d (was %s, %d)", newAddr, e2, leaderAddr, e1)
	}
	t.Logf("epoch %d began at offset %d (the last of epoch %d was %d)", e2, first2, e1, last1)

	adm := kadm.NewClient(kafkaClient(t, kgo.SeedBrokers(newAddr)))
	var req kadm.OffsetForLeaderEpochRequest
	req.Add(topic, 0, e1)
	got, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatalf("OffsetForLeaderEpoch(%d): %v", e1, err)
	}
	if r := got[topic][0]; r.Err != nil || r.LeaderEpoch != e1 || r.EndOffset != first2 {
		t.Fatalf("OffsetForLeaderEpoch(%d) = epoch %d end %d (%v), want epoch %d end %d", e1, r.LeaderEpoch, r.EndOffset, r.Err, e1, first2)
	}
	req = nil
	req.Add(topic, 0, e2)
	if got, err = adm.OffsetForLeaderEpoch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if r := got[topic][0]; r.Err != nil || r.LeaderEpoch != e2 || r.EndOffset != last2+1 {
		t.Fatalf("OffsetForLeaderEpoch(%d) = epoch %d end %d (%v), want epoch %d end %d", e2, r.LeaderEpoch, r.EndOffset, r.Err, e2, last2+1)
	}
	// An epoch between none of the stored batches' (e.g. a takeover that
	// wrote nothing) answers the largest epoch below it with data.
	if e2-e1 > 1 {
		req = nil
		req.Add(topic, 0, e2-1)
		if got, err = adm.OffsetForLeaderEpoch(ctx, req); err == nil {
			if r := got[topic][0]; r.LeaderEpoch != e1 || r.EndOffset != first2 {
				t.Fatalf("OffsetForLeaderEpoch(%d) = epoch %d end %d, want epoch %d end %d", e2-1, r.LeaderEpoch, r.EndOffset, e1, first2)
			}
		}
	}
}
