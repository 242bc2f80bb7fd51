package kafkago

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

func broker(t *testing.T) string {
	b := os.Getenv("KAFKA_BROKER")
	if b == "" {
		t.Skip("KAFKA_BROKER not set (run through e2e TestKafkaGoClient)")
	}
	return b
}

func createTopic(t *testing.T, ctx context.Context, cl *kafka.Client, topic string, parts int) {
	t.Helper()
	res, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: parts, ReplicationFactor: 1}}})
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
	if err := res.Errors[topic]; err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
}

// TestKafkaGoProduceConsume: acks 0/1/all and every codec, keys and
// headers, read back from the first offset and from the last, ListOffsets
// by time, a missing topic.
func TestKafkaGoProduceConsume(t *testing.T) {
	b := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(b), Timeout: 20 * time.Second}
	createTopic(t, ctx, cl, "kgo-pc", 1)
	start := time.Now().Add(-time.Second)

	var want []string
	for _, acks := range []kafka.RequiredAcks{kafka.RequireNone, kafka.RequireOne, kafka.RequireAll} {
		for _, codec := range []compress.Compression{0, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
			w := &kafka.Writer{Addr: kafka.TCP(b), Topic: "kgo-pc", RequiredAcks: acks, Compression: codec,
				BatchTimeout: 10 * time.Millisecond, WriteBackoffMax: 200 * time.Millisecond}
			var msgs []kafka.Message
			for i := range 3 {
				v := fmt.Sprintf("acks%d-%v-%d", acks, codec, i)
				want = append(want, v)
				msgs = append(msgs, kafka.Message{Key: []byte("k"), Value: []byte(v), Headers: []kafka.Header{{Key: "h", Value: []byte(v)}}})
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				t.Fatalf("WriteMessages acks=%d codec=%v: %v", acks, codec, err)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("close writer: %v", err)
			}
		}
	}
	// acks=0 writes are not acknowledged: wait until all are in.
	deadline := time.Now().Add(30 * time.Second)
	for {
		lo, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"kgo-pc": {kafka.LastOffsetOf(0)}}})
		if err != nil {
			t.Fatalf("ListOffsets: %v", err)
		}
		if po := lo.Topics["kgo-pc"]; len(po) == 1 && po[0].LastOffset == int64(len(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("high watermark never reached %d: %+v", len(want), lo.Topics)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b}, Topic: "kgo-pc", Partition: 0, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	var got []string
	for len(got) < len(want) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("ReadMessage after %d: %v", len(got), err)
		}
		if string(m.Key) != "k" || len(m.Headers) != 1 || string(m.Headers[0].Value) != string(m.Value) {
			t.Fatalf("message %d: key %q headers %+v value %q", m.Offset, m.Key, m.Headers, m.Value)
		}
		got = append(got, string(m.Value))
	}
	sort.Strings(got)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %v, want %v", got, want)
	}

	lo, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"kgo-pc": {kafka.TimeOffsetOf(0, start), kafka.FirstOffsetOf(0)}}})
	if err != nil {
		t.Fatalf("ListOffsets by time: %v", err)
	}
	t.Logf("ListOffsets: %+v", lo.Topics["kgo-pc"])
	if po := lo.Topics["kgo-pc"]; len(po) != 1 || po[0].Error != nil || po[0].FirstOffset != 0 {
		t.Fatalf("ListOffsets by time/first: %+v", po)
	}
	if _, ok := lo.Topics["kgo-pc"][0].Offsets[0]; !ok {
		t.Errorf("offset for time %v: %+v, want offset 0", start, lo.Topics["kgo-pc"][0].Offsets)
	}

	// From the latest: only what is produced afterwards.
	lr := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b}, Topic: "kgo-pc", Partition: 0, MaxWait: 200 * time.Millisecond})
	defer lr.Close()
	if err := lr.SetOffset(kafka.LastOffset); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(b), Topic: "kgo-pc", RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	go func() {
		for ctx.Err() == nil {
			_ = w.WriteMessages(ctx, kafka.Message{Value: []byte("latest")})
			time.Sleep(200 * time.Millisecond)
		}
	}()
	m, err := lr.ReadMessage(ctx)
	if err != nil || string(m.Value) != "latest" || m.Offset < int64(len(want)) {
		t.Fatalf("from latest: %q at %d, %v", m.Value, m.Offset, err)
	}

	// A missing topic: an error, no hang, no creation.
	mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
	defer mcancel()
	mw := &kafka.Writer{Addr: kafka.TCP(b), Topic: "kgo-missing", RequiredAcks: kafka.RequireAll, MaxAttempts: 2}
	err = mw.WriteMessages(mctx, kafka.Message{Value: []byte("x")})
	if !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("produce to a missing topic: %v, want UnknownTopicOrPartition", err)
	}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"kgo-missing"}})
	if err != nil {
		t.Fatalf("Metadata of a missing topic: %v", err)
	}
	if len(md.Topics) != 1 || !errors.Is(md.Topics[0].Error, kafka.UnknownTopicOrPartition) {
		t.Fatalf("Metadata of a missing topic: %+v", md.Topics)
	}
}
