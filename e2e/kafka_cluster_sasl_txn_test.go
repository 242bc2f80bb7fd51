package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterTxnWithSASL: on 3 nodes whose Kafka listeners require
// SASL (--auth-tokens), a transaction over partitions led by every node
// commits: the other leaders' KIP-890 checks reach the coordinator and the
// coordinator's markers reach the other leaders, through their SASL
// listeners as the internal SCRAM user (the cluster secret), and a
// read_committed consumer reads every record. Without node credentials
// EndTxn answered COORDINATOR_NOT_AVAILABLE until the client gave up.
// Then an IncrementalAlterConfigs of that topic sent to one node (as kadm
// does) reaches the partitions other nodes lead, through the same
// internal identity: every partition refuses a batch above the new
// max.message.bytes.
func TestKafkaClusterTxnWithSASL(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	tokens := writeTokenFile(t, filepath.Join(t.TempDir(), "tokens.yaml"), matrixTokens...)
	c := startCluster(t, 3, clusterOpts{Kafka: true, Token: rootToken, Extra: []string{"--auth-tokens", tokens}})
	seeds := c.kafkaSeeds()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topic, parts = "sasltx", 6
	admin := kafkaClient(t, kgo.SeedBrokers(seeds...), plainSASL(rootToken))
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, admin); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %v %+v", topic, err, resp)
	}
	if owners := distinct(partitionLeaders(t, ctx, admin, topic)); owners < 2 {
		t.Fatalf("partitions are led by %d brokers, want several", owners)
	}

	p := kafkaClient(t, kgo.SeedBrokers(seeds...), plainSASL(rootToken), kgo.TransactionalID("sasltx-producer"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(60*time.Second))
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * parts {
		r := &kgo.Record{Partition: int32(i % parts), Value: []byte(fmt.Sprintf("tx-%02d", i))}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", r.Value, err)
		}
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit across nodes with SASL listeners: %v", err)
	}

	cons := kafkaClient(t, kgo.SeedBrokers(seeds...), plainSASL(rootToken), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cons.Close()
	got := map[string]bool{}
	for len(got) < 2*parts {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read_committed consumer read %d of %d records: %v", len(got), 2*parts, err)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch: %v", fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
	}

	one := kafkaClient(t, kgo.SeedBrokers(c.nodes[0].KafkaAddr), plainSASL(rootToken))
	defer one.Close()
	res, err := kadm.NewClient(one).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("1024")}}, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = res.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("IncrementalAlterConfigs at %s: %v", c.nodes[0].ID, err)
	}
	noise := make([]byte, 4096)
	_, _ = rand.Read(noise)
	plainP := kafkaClient(t, kgo.SeedBrokers(seeds...), plainSASL(rootToken), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2))
	defer plainP.Close()
	for p := range int32(parts) {
		// Leaders cache a topic's max.message.bytes for up to 5 s.
		var err error
		if !pollUntil(20*time.Second, 500*time.Millisecond, func() bool {
			err = plainP.ProduceSync(ctx, &kgo.Record{Partition: p, Value: noise}).FirstErr()
			return errors.Is(err, kerr.MessageTooLarge)
		}) {
			t.Fatalf("partition %d after max.message.bytes=1024 at %s: %v, want MESSAGE_TOO_LARGE", p, c.nodes[0].ID, err)
		}
	}
}
