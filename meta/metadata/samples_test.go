package metadata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The registry's persisted formats, pinned by samples in testdata/formats
// written once by samples_gen_test.go. Each test decodes a checked-in file
// and compares every field with a value written out here, never with a
// re-encoding: a renamed JSON name, a renumbered field or a changed default
// makes a sample stop decoding to what earlier versions meant by it.

const (
	sampleStreamName    = "/orders/eu"
	sampleDerivedName   = "/density/s-0000001"
	sampleCompactedName = "/connect-configs"
)

func readSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "formats", name))
	if err != nil {
		t.Fatalf("sample %s: %v (samples are written once by: go test -tags picomq_samples -run TestWriteSamples)", name, err)
	}
	return b
}

// check reports a field whose decoded value differs from the pinned one.
func check[T comparable](t *testing.T, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

var sampleCreated = time.Date(2026, 12, 1, 20, 30, 0, 123456789, time.UTC)

func TestSampleStreamRecord(t *testing.T) {
	s, err := decodeStreamValue(sampleStreamName, readSample(t, "stream-record.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "Name", s.Name, sampleStreamName)
	check(t, "ID", s.ID, 7)
	check(t, "ContentType", s.ContentType, "application/json")
	check(t, "CreatedAt", s.CreatedAt, sampleCreated)
	check(t, "Owner", s.Owner, "node-a")
	check(t, "Epoch", s.Epoch, 12)
	check(t, "KafkaTopic", s.KafkaTopic, "orders-eu")
	check(t, "RetentionMs", s.RetentionMs, 3_600_000)
	check(t, "RetentionBytes", s.RetentionBytes, 1<<30)
	check(t, "MaxBatchBytes", s.MaxBatchBytes, 1<<20)
	check(t, "Durability", s.Durability, "object")
	check(t, "StartOffset", s.StartOffset, 42)
	check(t, "TTLSeconds", s.TTLSeconds, 60)
	if s.ExpiresAt == nil {
		t.Error("ExpiresAt = nil")
	} else {
		check(t, "ExpiresAt", *s.ExpiresAt, time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC))
	}
	if s.Fork == nil {
		t.Fatal("Fork = nil")
	}
	check(t, "Fork.Source", s.Fork.Source, "/src")
	check(t, "Fork.SourceID", s.Fork.SourceID, 3)
	check(t, "Fork.Offset", s.Fork.Offset, 10)
	check(t, "Fork.SubOffset", s.Fork.SubOffset, 5)
	check(t, "Fork.End", s.Fork.End, 11)
	check(t, "Fork.LastBytes", s.Fork.LastBytes, 2)
	check(t, "ForkRefs", s.ForkRefs, 2)
	check(t, "SoftDeleted", s.SoftDeleted, true)
	check(t, "Deleting", s.Deleting, true)
}

// TestSampleStreamRecordCompacted: a compacted stream's settings
// (cleanup.policy=compact,delete and the Kafka configs that tune it) read
// back field by field.
func TestSampleStreamRecordCompacted(t *testing.T) {
	s, err := decodeStreamValue(sampleCompactedName, readSample(t, "stream-record-compacted.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "ID", s.ID, 8)
	check(t, "KafkaTopic", s.KafkaTopic, "connect-configs")
	if s.Compaction == nil {
		t.Fatal("Compaction = nil")
	}
	c := *s.Compaction
	check(t, "Delete", c.Delete, true)
	check(t, "DeleteRetentionMs", c.DeleteRetentionMs, 86_400_000)
	check(t, "MinLagMs", c.MinLagMs, 1000)
	check(t, "MaxLagMs", c.MaxLagMs, 60_000)
	check(t, "SegmentMs", c.SegmentMs, 604_800_000)
	check(t, "MinDirtyRatioPPM", c.MinDirtyRatioPPM, 500_000)
}

// TestSampleStreamRecordDerivedTopic: a topic alias derived from the name
// is stored as a flag; the sample decodes to the alias under its own name.
func TestSampleStreamRecordDerivedTopic(t *testing.T) {
	s, err := decodeStreamValue(sampleDerivedName, readSample(t, "stream-record-derived.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "ID", s.ID, 100001)
	check(t, "ContentType", s.ContentType, "application/octet-stream")
	check(t, "CreatedAt", s.CreatedAt, sampleCreated)
	check(t, "Owner", s.Owner, "node-a")
	check(t, "Epoch", s.Epoch, 1)
	check(t, "KafkaTopic", s.KafkaTopic, "density.s-0000001")
	check(t, "Fork == nil", s.Fork == nil, true)
	check(t, "ExpiresAt == nil", s.ExpiresAt == nil, true)
}

// TestSampleStreamRecordLegacyJSON reads a record as versions before the
// compact format wrote it (a JSON object), from the checked-in file.
func TestSampleStreamRecordLegacyJSON(t *testing.T) {
	s, err := decodeStreamValue(sampleStreamName, readSample(t, "stream-record-legacy.json"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "Name", s.Name, sampleStreamName)
	check(t, "ID", s.ID, 5)
	check(t, "ContentType", s.ContentType, "application/json")
	check(t, "CreatedAt", s.CreatedAt, sampleCreated)
	check(t, "Owner", s.Owner, "n1")
	check(t, "Epoch", s.Epoch, 2)
	check(t, "KafkaTopic", s.KafkaTopic, "legacy")
	check(t, "RetentionMs", s.RetentionMs, 60_000)
	check(t, "StartOffset", s.StartOffset, 3)
	check(t, "Fork == nil", s.Fork == nil, true)
	if _, err := decodeStreamValue("/another", readSample(t, "stream-record-legacy.json")); err == nil {
		t.Error("a legacy record decoded under another stream's name")
	}
}

func TestSampleTopicEntry(t *testing.T) {
	e, err := DecodeTopicEntry(readSample(t, "topic-entry.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "Stream", e.Stream, "/a/b")
	check(t, "ID", e.ID, 9)
	e, err = DecodeTopicEntry(readSample(t, "topic-entry-legacy.json"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "legacy Stream", e.Stream, "/old/1")
	check(t, "legacy ID", e.ID, 5)
}

func TestSampleManifest(t *testing.T) {
	m, err := DecodeManifest(readSample(t, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "Node", m.Node, "node-a")
	check(t, "Seq", m.Seq, 17)
	check(t, "Object", m.Object, "l0/node-a/00000000000000000017-5f3a")
	check(t, "Size", m.Size, 4096)
	check(t, "Level", m.Level, 1)
	check(t, "CreatedAt", m.CreatedAt, sampleCreated)
	if len(m.Streams) != 2 {
		t.Fatalf("%d streams, want 2", len(m.Streams))
	}
	s := m.Streams[0]
	check(t, "StreamID", s.StreamID, 7)
	check(t, "First", s.First, 100)
	check(t, "Next", s.Next, 150)
	check(t, "Offset", s.Offset, 0)
	check(t, "Length", s.Length, 2048)
	check(t, "CRC", s.CRC, 0xdeadbeef)
	check(t, "Batches", s.Batches, 3)
	check(t, "FirstTimestamp", s.FirstTimestamp, 1764621000000)
	check(t, "MaxTimestamp", s.MaxTimestamp, 1764621000999)
	// The state is opaque here (node/stream pins its own sample); it must
	// come through byte for byte.
	check(t, "State", string(s.State), `{"lastTs":1764621000999,"writerSeq":"w-9","producers":{"pico:p1":{"epoch":2,"lastSeq":9,"recent":[[9,140,150,1764621000999]]}}}`)
	s = m.Streams[1]
	check(t, "[1].StreamID", s.StreamID, 9)
	check(t, "[1].Next", s.Next, 1)
	check(t, "[1].Offset", s.Offset, 2048)
	check(t, "[1].Length", s.Length, 80)
	check(t, "[1].State", len(s.State), 0)
}

func TestSampleMember(t *testing.T) {
	m, err := DecodeMember(readSample(t, "member.json"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "NodeID", m.NodeID, "node-a")
	check(t, "AdvertiseURL", m.AdvertiseURL, "http://10.0.0.1:8080")
	check(t, "KafkaAddr", m.KafkaAddr, "10.0.0.1:9092")
	check(t, "Protocol", m.Protocol, "pico")
	check(t, "StartedAt", m.StartedAt, sampleCreated)
	// The sample predates the field: such a node serves no
	// transaction.version 2, and the Kafka frontend must see 0.
	check(t, "TxnVersion", m.TxnVersion, 0)
	b, err := json.Marshal(Member{NodeID: "n", TxnVersion: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"txnVersion":2`) {
		t.Fatalf("member record %s: want the field txnVersion", b)
	}
}

func TestSampleReservation(t *testing.T) {
	var r Reservation
	if err := json.Unmarshal(readSample(t, "reservation.json"), &r); err != nil {
		t.Fatal(err)
	}
	check(t, "Epoch", r.Epoch, 12)
	check(t, "Base", r.Base, 100)
	check(t, "End", r.End, 4196)
	check(t, "Rev (not stored)", r.Rev, 0)
}
