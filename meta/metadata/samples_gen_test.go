//go:build picomq_samples

package metadata

// The generator of the format samples in testdata/formats, run once by hand
// when a format gains a version (docs/storage.md, "Pinned formats"):
//
//	go test -tags picomq_samples -run '^TestWriteSamples$' ./meta/metadata/
//
// It is behind a build tag so no test run rewrites the files the reader
// tests (samples_test.go) hold today's code to.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/tiering/extent"
)

func TestWriteSamples(t *testing.T) {
	created := time.Date(2026, 12, 1, 20, 30, 0, 123456789, time.UTC)
	expires := time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC)
	full := Stream{Name: sampleStreamName, ID: 7, ContentType: "application/json", CreatedAt: created,
		Owner: "node-a", Epoch: 12, KafkaTopic: "orders-eu", RetentionMs: 3_600_000, RetentionBytes: 1 << 30,
		MaxBatchBytes: 1 << 20, Durability: "object", StartOffset: 42, TTLSeconds: 60, ExpiresAt: &expires,
		Fork:     &StreamFork{Source: "/src", SourceID: 3, Offset: 10, SubOffset: 5, End: 11, LastBytes: 2},
		ForkRefs: 2, SoftDeleted: true, Deleting: true}
	derived := Stream{Name: sampleDerivedName, ID: 100001, ContentType: "application/octet-stream",
		CreatedAt: created, Owner: "node-a", Epoch: 1, KafkaTopic: "density.s-0000001"}
	compacted := Stream{Name: sampleCompactedName, ID: 8, ContentType: "application/vnd.kafka", CreatedAt: created,
		Owner: "node-a", Epoch: 1, KafkaTopic: "connect-configs", Compaction: &StreamCompaction{Delete: true,
			DeleteRetentionMs: 86_400_000, MinLagMs: 1000, MaxLagMs: 60_000, SegmentMs: 604_800_000, MinDirtyRatioPPM: 500_000}}
	// Earlier versions stored the JSON form of the same type.
	legacy, err := json.Marshal(Stream{Name: sampleStreamName, ID: 5, ContentType: "application/json",
		CreatedAt: created, Owner: "n1", Epoch: 2, KafkaTopic: "legacy", RetentionMs: 60_000, StartOffset: 3})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal(Manifest{Node: "node-a", Seq: 17, Object: "l0/node-a/00000000000000000017-5f3a",
		Size: 4096, Level: 1, CreatedAt: created, Streams: []ManifestStream{
			{Extent: extent.Extent{StreamID: 7, First: 100, Next: 150, Offset: 0, Length: 2048, CRC: 0xdeadbeef,
				Batches: 3, FirstTimestamp: 1764621000000, MaxTimestamp: 1764621000999},
				State: json.RawMessage(`{"lastTs":1764621000999,"writerSeq":"w-9","producers":{"pico:p1":{"epoch":2,"lastSeq":9,"recent":[[9,140,150,1764621000999]]}}}`)},
			{Extent: extent.Extent{StreamID: 9, First: 0, Next: 1, Offset: 2048, Length: 80}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	member, err := json.Marshal(Member{NodeID: "node-a", AdvertiseURL: "http://10.0.0.1:8080",
		KafkaAddr: "10.0.0.1:9092", Protocol: "pico", StartedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	reservation, err := json.Marshal(Reservation{Epoch: 12, Base: 100, End: 4196, Rev: 99})
	if err != nil {
		t.Fatal(err)
	}
	topicLegacy, err := json.Marshal(TopicEntry{Stream: "/old/1", ID: 5})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"stream-record.bin":           encodeStream(full),
		"stream-record-derived.bin":   encodeStream(derived),
		"stream-record-compacted.bin": encodeStream(compacted),
		"stream-record-legacy.json":   legacy,
		"topic-entry.bin":             EncodeTopicEntry(TopicEntry{Stream: "/a/b", ID: 9}),
		"topic-entry-legacy.json":     topicLegacy,
		"manifest.json":               manifest,
		"member.json":                 member,
		"reservation.json":            reservation,
	} {
		if err := os.WriteFile(filepath.Join("testdata", "formats", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
