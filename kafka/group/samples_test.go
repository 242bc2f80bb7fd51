package group

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// TestSampleOffsetsBatch reads a batch of a group's offsets stream as this
// package wrote it once (testdata/formats/offsets-batch.bin, by
// samples_gen_test.go): a commit with metadata, one with null metadata
// and leader epoch -1, and a commit then a deletion of the same partition.
// Applying it must leave exactly the offsets written below.
func TestSampleOffsetsBatch(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "formats", "offsets-batch.bin"))
	if err != nil {
		t.Fatalf("%v (written once by: go test -tags picomq_samples -run TestWriteSamples ./kafka/group/)", err)
	}
	recs, err := record.DecodeRecords(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	o := &offsets{m: map[tp]committed{}}
	for _, r := range recs {
		if err := o.apply(r); err != nil {
			t.Fatalf("record %d: %v", r.Offset, err)
		}
	}
	if len(o.m) != 2 {
		t.Fatalf("offsets %v, want two partitions", o.m)
	}
	c, ok := o.m[tp{topic: "orders.eu", partition: 0}]
	if !ok || c.offset != 1234 || c.epoch != 5 || c.at != 1764621000999 || c.metadata == nil || *c.metadata != "checkpoint-7" {
		t.Errorf("orders.eu/0 = %+v (present %v), want offset 1234, epoch 5, at 1764621000999, metadata checkpoint-7", c, ok)
	}
	c, ok = o.m[tp{topic: "orders.eu", partition: 3}]
	if !ok || c.offset != 0 || c.epoch != -1 || c.at != 1764621001000 || c.metadata != nil {
		t.Errorf("orders.eu/3 = %+v (present %v), want offset 0, epoch -1, at 1764621001000, null metadata", c, ok)
	}
	if _, ok := o.m[tp{topic: "gone", partition: 1}]; ok {
		t.Error("gone/1 survived its deletion record")
	}
}

// TestSampleOffsetsStreamName pins where a group's offsets live: the
// stream name is part of the stored format (a renamed root or escape
// loses every committed offset).
func TestSampleOffsetsStreamName(t *testing.T) {
	for id, want := range map[string]string{
		"billing":    "/_sys/kafka/groups/billing",
		"my group/1": "/_sys/kafka/groups/my~20group~2F1",
		"..":         "/_sys/kafka/groups/~2E~2E",
	} {
		got, err := streamName(id)
		if err != nil || got != want {
			t.Errorf("streamName(%q) = %q, %v, want %q", id, got, err, want)
		}
		if back, ok := groupID(want); !ok || back != id {
			t.Errorf("groupID(%q) = %q, %v, want %q", want, back, ok, id)
		}
	}
}
