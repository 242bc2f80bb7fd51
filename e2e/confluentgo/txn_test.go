package confluentgo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func txnProducer(t *testing.T, b, id string) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b, "transactional.id": id,
		"transaction.timeout.ms": 60000, "linger.ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatalf("InitTransactions %s: %v", id, err)
	}
	return p
}

// produceTxn writes values to topic partition 0 inside the producer's open
// transaction and waits for their delivery reports.
func produceTxn(t *testing.T, p *kafka.Producer, topic string, values ...string) {
	t.Helper()
	dc := make(chan kafka.Event, len(values))
	for _, v := range values {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte(v)}, dc); err != nil {
			t.Fatal(err)
		}
	}
	for range values {
		select {
		case e := <-dc:
			if m := e.(*kafka.Message); m.TopicPartition.Error != nil {
				t.Fatalf("produce: %v", m.TopicPartition.Error)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("no delivery report")
		}
	}
}

// readAll reads topic from the start with isolation level iso until want
// values arrived and the partition stayed quiet for a second.
func readAll(t *testing.T, b, topic, iso string, want int) []string {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b, "group.id": fmt.Sprintf("%s-%s-%d", topic, iso, time.Now().UnixNano()),
		"auto.offset.reset": "earliest", "isolation.level": iso, "enable.auto.commit": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(60 * time.Second)
	quiet := time.Time{}
	for time.Now().Before(deadline) {
		m, err := c.ReadMessage(250 * time.Millisecond)
		if err == nil {
			got = append(got, string(m.Value))
			quiet = time.Time{}
			continue
		}
		if len(got) >= want {
			if quiet.IsZero() {
				quiet = time.Now()
			} else if time.Since(quiet) > time.Second {
				break
			}
		}
	}
	sort.Strings(got)
	return got
}

// TestConfluentTransactions: librdkafka's transactional producer commits
// and aborts; read_committed consumers see only committed records,
// read_uncommitted ones everything; consume-transform-produce commits the
// consumer's offsets in the transaction; a second producer with the same
// transactional.id fences the first (a fatal error for the zombie) and its
// open transaction is aborted.
func TestConfluentTransactions(t *testing.T) {
	b := broker(t)
	adm := createTopic(t, b, "ck-tx-in", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := adm.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: "ck-tx-out", NumPartitions: 1, ReplicationFactor: 1},
		{Topic: "ck-tx-fence", NumPartitions: 1, ReplicationFactor: 1}}); err != nil || res[0].Error.Code() != kafka.ErrNoError || res[1].Error.Code() != kafka.ErrNoError {
		t.Fatalf("CreateTopics: %v %v", res, err)
	}

	p := txnProducer(t, b, "ck-tx")
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, p, "ck-tx-in", "c1", "c2", "c3")
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceTxn(t, p, "ck-tx-in", "a1", "a2")
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if got := fmt.Sprint(readAll(t, b, "ck-tx-in", "read_committed", 3)); got != "[c1 c2 c3]" {
		t.Fatalf("read_committed: %s", got)
	}
	if got := fmt.Sprint(readAll(t, b, "ck-tx-in", "read_uncommitted", 5)); got != "[a1 a2 c1 c2 c3]" {
		t.Fatalf("read_uncommitted: %s", got)
	}

	t.Run("consume-transform-produce", func(t *testing.T) {
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b, "group.id": "ck-ctp", "auto.offset.reset": "earliest",
			"isolation.level": "read_committed", "enable.auto.commit": false})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Subscribe("ck-tx-in", nil); err != nil {
			t.Fatal(err)
		}
		tp := txnProducer(t, b, "ck-ctp-tx")
		if err := tp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var in []string
		deadline := time.Now().Add(60 * time.Second)
		for len(in) < 3 && time.Now().Before(deadline) {
			m, err := c.ReadMessage(250 * time.Millisecond)
			if err != nil {
				continue
			}
			in = append(in, string(m.Value))
			produceTxn(t, tp, "ck-tx-out", "t-"+string(m.Value))
		}
		if len(in) != 3 {
			t.Fatalf("consumed %v", in)
		}
		pos, err := c.Position(must(c.Assignment()))
		if err != nil {
			t.Fatal(err)
		}
		meta, err := c.GetConsumerGroupMetadata()
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.SendOffsetsToTransaction(ctx, pos, meta); err != nil {
			t.Fatalf("SendOffsetsToTransaction: %v", err)
		}
		if err := tp.CommitTransaction(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if got := fmt.Sprint(readAll(t, b, "ck-tx-out", "read_committed", 3)); got != "[t-c1 t-c2 t-c3]" {
			t.Fatalf("transformed: %s", got)
		}
		topic := "ck-tx-in"
		var committed []kafka.TopicPartition
		for time.Now().Before(deadline) {
			committed, err = c.Committed([]kafka.TopicPartition{{Topic: &topic, Partition: 0}}, 10000)
			if err == nil && len(committed) == 1 && committed[0].Offset == pos[0].Offset {
				break
			}
		}
		if err != nil || len(committed) != 1 || committed[0].Offset != pos[0].Offset {
			t.Fatalf("committed offsets %v %v, want %v", committed, err, pos)
		}
	})

	t.Run("fenced zombie", func(t *testing.T) {
		zombie := txnProducer(t, b, "ck-fence")
		if err := zombie.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produceTxn(t, zombie, "ck-tx-fence", "zombie")
		fresh := txnProducer(t, b, "ck-fence") // fences the zombie, aborts its transaction
		if err := fresh.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produceTxn(t, fresh, "ck-tx-fence", "fresh")
		if err := fresh.CommitTransaction(ctx); err != nil {
			t.Fatalf("fresh commit: %v", err)
		}
		err := zombie.CommitTransaction(ctx)
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || !(ke.IsFatal() || ke.Code() == kafka.ErrFenced || ke.Code() == kafka.ErrProducerFenced || ke.Code() == kafka.ErrInvalidProducerEpoch) {
			t.Fatalf("zombie commit: %v, want fenced", err)
		}
		if got := fmt.Sprint(readAll(t, b, "ck-tx-fence", "read_committed", 1)); got != "[fresh]" {
			t.Fatalf("read_committed: %s", got)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
