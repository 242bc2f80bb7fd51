package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDSTombstones: a null value (a Kafka tombstone, or Pico's
// {"value":null}) in a stream read over Durable Streams is JSON null in a
// JSON-mode read and adds no bytes to a byte-mode read
// (docs/durable-streams.md#null-values). It once read as "", a value
// nobody wrote.
func TestDSTombstones(t *testing.T) {
	n, addr := startKafkaNode(t, t.TempDir(), "--protocol", "durable-streams", "--long-poll-timeout", "300ms")
	wantStatus(t, do(t, "PUT", dsURL(n, "/tomb/json"), nil, "Content-Type", "application/json"), 201, "create JSON stream")
	wantStatus(t, do(t, "PUT", dsURL(n, "/tomb/bytes"), nil, "Content-Type", "text/plain"), 201, "create byte stream")

	cl := kafkaClient(t, kgo.SeedBrokers(addr))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx,
		&kgo.Record{Topic: "tomb.json", Key: []byte("k"), Value: []byte(`{"a":1}`)},
		&kgo.Record{Topic: "tomb.json", Key: []byte("k")}, // tombstone
		&kgo.Record{Topic: "tomb.bytes", Value: []byte("x\n")},
		&kgo.Record{Topic: "tomb.bytes"}, // tombstone
		&kgo.Record{Topic: "tomb.bytes", Value: []byte("y\n")},
	)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("Kafka produce: %v", err)
	}

	r := do(t, "GET", dsURL(n, "/tomb/json")+"?offset=-1", nil)
	wantStatus(t, r, 200, "read JSON stream")
	if string(r.Body) != `[{"a":1},null]` {
		t.Fatalf("JSON-mode read with a tombstone: %s, want [{\"a\":1},null]", r.Body)
	}
	wantHeader(t, r, "Stream-Next-Offset", off(2))
	r = do(t, "GET", dsURL(n, "/tomb/bytes")+"?offset=-1", nil)
	wantStatus(t, r, 200, "read byte stream")
	if string(r.Body) != "x\ny\n" {
		t.Fatalf("byte-mode read with a tombstone: %q, want \"x\\ny\\n\"", r.Body)
	}
	wantHeader(t, r, "Stream-Next-Offset", off(3))
}
