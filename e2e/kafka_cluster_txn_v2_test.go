package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	precord "github.com/PicoMQ/picomq/record"
)

// TestKafkaClusterTxnV2: 3 nodes, a 6-partition topic led by all three,
// a franz-go transactional producer, which uses transaction.version 2
// (KIP-890 part 2) because the nodes finalize it: it never sends
// AddPartitionsToTxn, the partitions' leaders add them, those on other
// nodes than the coordinator through AddPartitionsToTxn v5 to it. Two
// transactions commit and one aborts between them; read_committed sees
// exactly the committed ones. Every EndTxn bumped the epoch (3 ends, epoch
// 3). A zombie at the first epoch producing to a partition where the
// producer never wrote, led by a node that does not coordinate, is
// refused by the coordinator through that path (INVALID_PRODUCER_EPOCH).
func TestKafkaClusterTxnV2(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startCluster(t, 3, clusterOpts{Kafka: true})
	seeds := c.kafkaSeeds()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const topic, other, parts, txnID = "txv2", "txv2-other", 6, "txv2-producer"
	createSpreadTopic(t, c, topic, parts)
	createSpreadTopic(t, c, other, 3)
	admin := kafkaClient(t, kgo.SeedBrokers(seeds...))
	if owners := distinct(partitionLeaders(t, ctx, admin, topic)); owners != 3 {
		t.Fatalf("partitions are led by %d brokers, want 3", owners)
	}
	p := kafkaClient(t, kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(topic),
		kgo.TransactionTimeout(60*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// franz-go chooses transaction.version 2 at BeginTransaction from
	// the ApiVersions it has: connect first.
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	txn := func(prefix string, commit bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 * parts {
			r := &kgo.Record{Partition: int32(i % parts), Value: []byte(fmt.Sprintf("%s-%02d", prefix, i))}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", r.Value, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end %s: %v", prefix, err)
		}
	}
	txn("c1", true)
	txn("ab", false)
	txn("c2", true)

	coord, err := txnCoordinator(ctx, c, admin, txnID)
	if err != nil {
		t.Fatal(err)
	}
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{txnID}
	dr, err := dt.RequestWith(ctx, admin)
	if err != nil || len(dr.TransactionStates) != 1 || dr.TransactionStates[0].ErrorCode != 0 {
		t.Fatalf("DescribeTransactions: %v %+v", err, dr)
	}
	st := dr.TransactionStates[0]
	if st.ProducerEpoch != 3 || st.State != "CompleteCommit" {
		t.Fatalf("after 3 ends: epoch %d state %s, want 3 CompleteCommit (each EndTxn v5 bumps)", st.ProducerEpoch, st.State)
	}
	var remoteAdds float64
	for _, n := range c.nodes {
		t.Logf("%s (coordinator %v): checks ok %v added %v", n.ID, n == coord, metric(t, n.URL, `picomq_kafka_txn_checks_total{result="ok"}`), metric(t, n.URL, `picomq_kafka_txn_checks_total{result="added"}`))
		if n != coord {
			remoteAdds += metric(t, n.URL, `picomq_kafka_txn_checks_total{result="added"}`)
		}
	}
	// 3 transactions x the partitions the two other nodes lead.
	coordID := brokerID(t, ctx, admin, coord.KafkaAddr)
	remoteParts := 0
	for _, leader := range partitionLeaders(t, ctx, admin, topic) {
		if leader != coordID {
			remoteParts++
		}
	}
	if remoteParts == 0 || remoteAdds < float64(3*remoteParts) {
		t.Fatalf("leaders other than the coordinator added %v partitions, want %d (KIP-890 part 2 not in use?)", remoteAdds, 3*remoteParts)
	}

	got := readCommitted(t, ctx, seeds, topic, 4*parts)
	if len(got) != 4*parts {
		t.Fatalf("read_committed: %d records, want %d: %v", len(got), 4*parts, got)
	}
	for _, v := range got {
		if !strings.HasPrefix(v, "c1-") && !strings.HasPrefix(v, "c2-") {
			t.Fatalf("read_committed sees %q of the aborted transaction", v)
		}
	}

	// The zombie: epoch 0, a partition of the other topic led by a node
	// that does not coordinate, where the producer never wrote.
	leaders := partitionLeaders(t, ctx, admin, other)
	zp := int32(-1)
	for part, leader := range leaders {
		if leader != coordID {
			zp = part
			break
		}
	}
	if zp < 0 {
		t.Fatalf("every partition of %s is led by the coordinator %d", other, coordID)
	}
	batch := precord.AppendBatch(nil, precord.BatchOptions{Timestamp: time.Now().UnixMilli(),
		ProducerID: st.ProducerID, ProducerEpoch: 0, BaseSequence: 0, Transactional: true},
		[]precord.Record{{Value: []byte("zombie")}})
	req := kmsg.NewPtrProduceRequest()
	id := txnID
	req.Acks, req.TimeoutMillis, req.TransactionID = -1, 10_000, &id
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = other
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = zp, batch
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	resp, err := req.RequestWith(ctx, admin.Broker(int(leaders[zp])))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version < 12 {
		t.Fatalf("produce went out as v%d, want v12", resp.Version)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("zombie produce on node %d: %v, want INVALID_PRODUCER_EPOCH", leaders[zp], kerr.ErrorForCode(code))
	}
}

// brokerID is the Kafka node id of the broker listening at addr.
func brokerID(t *testing.T, ctx context.Context, cl *kgo.Client, addr string) int32 {
	t.Helper()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range resp.Brokers {
		if net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))) == addr {
			return b.NodeID
		}
	}
	t.Fatalf("no broker at %s in %+v", addr, resp.Brokers)
	return -1
}
