// Package sarama is a separate module so that the Sarama client and its
// dependencies stay out of PicoMQ's go.mod. e2e TestSaramaGroup runs this
// tests against a real node (KAFKA_BROKER); on their own they fail.
package sarama

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

const (
	topic = "sarama-orders"
	group = "sarama-billing"
)

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.ClientID = "picomq-e2e"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false // committed explicitly below
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = time.Second
	return cfg
}

func produce(t *testing.T, broker, prefix string, n int) {
	t.Helper()
	p, err := sarama.NewSyncProducer([]string{broker}, config())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(prefix + strconv.Itoa(i))}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// handler collects values; every message is marked and committed
// synchronously before it counts.
type handler struct {
	mu   sync.Mutex
	seen []string
	want int
	done chan struct{}
	once sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		s.Commit()
		h.mu.Lock()
		h.seen = append(h.seen, string(m.Value))
		if len(h.seen) >= h.want {
			h.once.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

// consume runs a consumer group until n messages arrived, then closes it
// (LeaveGroup).
func consume(t *testing.T, broker string, n int) []string {
	t.Helper()
	cg, err := sarama.NewConsumerGroup([]string{broker}, group, config())
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{want: n, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	select {
	case <-h.done:
	case err := <-errc:
		t.Fatalf("consume: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("consumed %d of %d within 2 minutes", len(h.seen), n)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("consume: %v", err)
	}
	if err := cg.Close(); err != nil {
		t.Fatalf("close consumer group: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

func exactly(t *testing.T, what string, got []string, prefix string, n int) {
	t.Helper()
	sort.Strings(got)
	want := make([]string, n)
	for i := range want {
		want[i] = prefix + strconv.Itoa(i)
	}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s got %v, want each of %s0..%s%d once", what, got, prefix, prefix, n-1)
	}
}

// TestSaramaGroup: Sarama (V2_8_0_0 protocol: JoinGroup v7, SyncGroup v5,
// OffsetCommit v8, OffsetFetch v7, Heartbeat v4) creates a topic, produces
// idempotently, consumes in a group committing each message, and a second
// consumer resumes after the committed offsets.
func TestSaramaGroup(t *testing.T) {
	broker := os.Getenv("KAFKA_BROKER")
	if broker == "" {
		t.Fatal("KAFKA_BROKER is not set: run through e2e TestSaramaGroup")
	}
	admin, err := sarama.NewClusterAdmin([]string{broker}, config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	produce(t, broker, "a", 30)
	exactly(t, "first consumer", consume(t, broker, 30), "a", 30)
	produce(t, broker, "b", 12)
	exactly(t, "second consumer", consume(t, broker, 12), "b", 12)

	offs, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, b := range offs.Blocks[topic] {
		total += b.Offset
	}
	if total != 42 {
		t.Fatalf("committed offsets sum to %d, want 42", total)
	}
	groups, err := admin.ListConsumerGroups()
	if err != nil || groups[group] != "consumer" {
		t.Fatalf("ListConsumerGroups = %v, %v", groups, err)
	}
}
