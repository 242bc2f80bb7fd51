// Package confluentgo runs confluent-kafka-go (cgo, with the librdkafka it
// bundles: a newer librdkafka than Debian's kcat) against a PicoMQ node
// named by KAFKA_BROKER; e2e TestKafkaConfluentGo starts the node.
package confluentgo

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func broker(t *testing.T) string {
	b := os.Getenv("KAFKA_BROKER")
	if b == "" {
		t.Skip("KAFKA_BROKER not set (run through e2e TestKafkaConfluentGo)")
	}
	return b
}

func createTopic(t *testing.T, b, topic string, parts int) *kafka.AdminClient {
	t.Helper()
	adm, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: parts, ReplicationFactor: 1}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("CreateTopics %s: %v %v", topic, res, err)
	}
	return adm
}

// TestConfluentProduceConsume: acks 0/1/all (idempotent with all) and
// every codec with keys and headers, read back from the beginning;
// offsets by time; a missing topic reports UNKNOWN_TOPIC_OR_PARTITION.
func TestConfluentProduceConsume(t *testing.T) {
	b := broker(t)
	const topic = "ck-pc"
	adm := createTopic(t, b, topic, 1)
	start := time.Now().Add(-time.Second).UnixMilli()
	var want []string
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		for _, acks := range []string{"0", "1", "all"} {
			p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b, "acks": acks,
				"compression.codec": codec, "enable.idempotence": acks == "all", "linger.ms": 5})
			if err != nil {
				t.Fatal(err)
			}
			tp := topic
			dc := make(chan kafka.Event, 1)
			v := codec + "-" + acks
			want = append(want, v)
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: 0},
				Key: []byte("k"), Value: []byte(v), Headers: []kafka.Header{{Key: "h", Value: []byte(v)}}}, dc); err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-dc:
				if m := e.(*kafka.Message); m.TopicPartition.Error != nil {
					t.Fatalf("produce %s: %v", v, m.TopicPartition.Error)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("produce %s: no delivery report", v)
			}
			p.Close()
		}
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b, "group.id": "ck-pc-reader", "auto.offset.reset": "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: strp(topic), Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		m, err := c.ReadMessage(time.Second)
		if err != nil {
			continue
		}
		if string(m.Key) != "k" || len(m.Headers) != 1 || string(m.Headers[0].Value) != string(m.Value) {
			t.Fatalf("record %q: key %q headers %v", m.Value, m.Key, m.Headers)
		}
		got = append(got, string(m.Value))
	}
	sort.Strings(got)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	offs, err := c.OffsetsForTimes([]kafka.TopicPartition{{Topic: strp(topic), Partition: 0, Offset: kafka.Offset(start)}}, 10000)
	if err != nil || len(offs) != 1 || offs[0].Offset != 0 {
		t.Fatalf("OffsetsForTimes: %v %v", offs, err)
	}
	md, err := adm.GetMetadata(strp("ck-missing"), false, 10000)
	if err != nil {
		t.Fatalf("metadata of a missing topic: %v", err)
	}
	if e := md.Topics["ck-missing"].Error; e.Code() != kafka.ErrUnknownTopicOrPart {
		t.Fatalf("metadata of a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", e)
	}
}

func strp(s string) *string { return &s }

// TestConfluentGroup: two members of a cooperative-sticky group (static
// members in one run) share 4 partitions; one leaves and the other takes
// them all; after both stop, a new member resumes after the commits.
func TestConfluentGroup(t *testing.T) {
	for _, static := range []bool{false, true} {
		t.Run(fmt.Sprintf("static=%v", static), func(t *testing.T) { runGroup(t, static) })
	}
}

func runGroup(t *testing.T, static bool) {
	b := broker(t)
	topic := fmt.Sprintf("ck-grp-%v", static)
	adm := createTopic(t, b, topic, 4)
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(prefix string, n int) {
		dc := make(chan kafka.Event, n)
		for i := range n {
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
				Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s%d", prefix, i))}, dc); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			select {
			case e := <-dc:
				if m := e.(*kafka.Message); m.TopicPartition.Error != nil {
					t.Fatalf("produce %s: %v", m.Value, m.TopicPartition.Error)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("produce %s: no delivery report", prefix)
			}
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	// Where each record sits, and per partition the offset the group's
	// successful commits reached: only a record below it counts as
	// committed. A commit that fails (REBALANCE_IN_PROGRESS while the
	// group completes a rebalance, as Kafka answers too) leaves its
	// record to be read again, which at-least-once allows.
	at := map[string]kafka.TopicPartition{}
	committed := map[int32]kafka.Offset{}
	// start runs a member; the returned func stops it and waits until it
	// has left the group.
	start := func(name string) func() {
		cfg := &kafka.ConfigMap{"bootstrap.servers": b, "group.id": "g-" + topic, "auto.offset.reset": "earliest",
			"enable.auto.commit": false, "partition.assignment.strategy": "cooperative-sticky",
			"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
		if static {
			_ = cfg.SetKey("group.instance.id", name)
		}
		c, err := kafka.NewConsumer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe(topic, nil); err != nil {
			t.Fatal(err)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := c.ReadMessage(200 * time.Millisecond)
				if err != nil {
					continue
				}
				mu.Lock()
				seen[string(m.Value)] = append(seen[string(m.Value)], name)
				at[string(m.Value)] = m.TopicPartition
				mu.Unlock()
				tps, err := c.CommitMessage(m)
				if err == nil && len(tps) == 1 && tps[0].Error != nil {
					err = tps[0].Error
				}
				if err != nil {
					t.Logf("%s commit of %s: %v", name, m.Value, err) // a commit racing a rebalance may fail; the record comes again
					continue
				}
				mu.Lock()
				p := m.TopicPartition.Partition
				committed[p] = max(committed[p], m.TopicPartition.Offset+1)
				mu.Unlock()
			}
		}()
		return func() { close(stop); <-done }
	}
	wait := func(prefix string, n int, by string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			c := 0
			for i := range n {
				who := seen[fmt.Sprintf("%s%d", prefix, i)]
				if len(who) > 0 && (by == "" || who[len(who)-1] == by) {
					c++
				}
			}
			mu.Unlock()
			if c == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %s0..%d consumed (by %q)", c, prefix, n-1, by)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stop1, stop2 := start("m1"), start("m2")
	produce("a", 40)
	wait("a", 40, "")
	stop2()
	produce("b", 20)
	wait("b", 20, "m1")
	stop1()
	produce("c", 5)
	mu.Lock()
	before := maps.Clone(committed) // what the new member must resume after
	mu.Unlock()
	stop3 := start("m3")
	wait("c", 5, "m3")
	stop3()
	mu.Lock()
	defer mu.Unlock()
	for v, who := range seen {
		tp := at[v]
		if v[0] != 'c' && who[len(who)-1] == "m3" && tp.Offset < before[tp.Partition] {
			t.Errorf("%s (partition %d offset %d) read again after the restart, though commits before it reached offset %d", v, tp.Partition, tp.Offset, before[tp.Partition])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopics(ctx, []string{topic}); err != nil {
		t.Errorf("DeleteTopics: %v", err)
	}
}
