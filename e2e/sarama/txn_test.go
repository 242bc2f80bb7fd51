package sarama

import (
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// readIsolated reads topic partition 0 from the oldest offset with the
// isolation level until want values came and a second passed quietly.
func readIsolated(t *testing.T, broker, topic string, iso sarama.IsolationLevel, want int) []string {
	t.Helper()
	cfg := config()
	cfg.Consumer.IsolationLevel = iso
	c, err := sarama.NewConsumer([]string{broker}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
			continue
		case <-time.After(time.Second):
			if len(got) >= want {
				sort.Strings(got)
				return got
			}
		case <-deadline:
			sort.Strings(got)
			return got
		}
	}
}

// TestSaramaTransactions: Sarama's transactional producer commits one
// transaction and aborts another; a read_committed consumer sees only the
// committed records, a read_uncommitted one all of them.
func TestSaramaTransactions(t *testing.T) {
	broker := os.Getenv("KAFKA_BROKER")
	if broker == "" {
		t.Fatal("KAFKA_BROKER is not set: run through e2e TestSaramaTransactions")
	}
	const txTopic = "sarama-tx"
	adm, err := sarama.NewClusterAdmin([]string{broker}, config())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(txTopic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	cfg := config()
	cfg.Producer.Transaction.ID = "sarama-txn"
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{broker}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(prefix string, commit bool) {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: txTopic, Partition: 0, Value: sarama.StringEncoder(fmt.Sprintf("%s%d", prefix, i))}); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		if commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	send("c", true)
	send("a", false)
	send("d", true)
	if got := fmt.Sprint(readIsolated(t, broker, txTopic, sarama.ReadCommitted, 6)); got != "[c0 c1 c2 d0 d1 d2]" {
		t.Fatalf("read_committed: %s", got)
	}
	if got := fmt.Sprint(readIsolated(t, broker, txTopic, sarama.ReadUncommitted, 9)); got != "[a0 a1 a2 c0 c1 c2 d0 d1 d2]" {
		t.Fatalf("read_uncommitted: %s", got)
	}
}
