package metadata

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func recordExamples() []Stream {
	created := time.Date(2026, 12, 1, 20, 30, 0, 123456789, time.UTC)
	expires := time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC)
	return []Stream{
		{Name: "/density/s-0000001", ID: 100001, ContentType: "application/octet-stream", CreatedAt: created,
			Owner: "node-a", Epoch: 1, KafkaTopic: "density.s-0000001"},
		{Name: "/orders/eu", ID: 7, ContentType: "application/json", CreatedAt: created, Owner: "n",
			Epoch: 12, KafkaTopic: "orders-eu", RetentionMs: 3_600_000, RetentionBytes: 1 << 30,
			MaxBatchBytes: 1 << 20, Durability: "object", StartOffset: 42, TTLSeconds: 60},
		{Name: "/f", ID: 1<<64 - 1, CreatedAt: created, Epoch: 1, ExpiresAt: &expires,
			Fork:     &StreamFork{Source: "/src", SourceID: 3, Offset: 10, SubOffset: 5, End: 11, LastBytes: 2},
			ForkRefs: 2, SoftDeleted: true, Deleting: true},
		{Name: "/zero", ID: 1, ExpiresAt: &time.Time{}, Fork: &StreamFork{}},
		{Name: "/connect-configs", ID: 8, CreatedAt: created, Epoch: 1, Compaction: &StreamCompaction{Delete: true,
			DeleteRetentionMs: 1000, MinLagMs: 5, MaxLagMs: 60_000, SegmentMs: 100, MinDirtyRatioPPM: 10_000}},
		{Name: "/compact-zero", ID: 9, Compaction: &StreamCompaction{}},
		{Name: "/neg", ID: 2, CreatedAt: time.Unix(-5, 7).UTC(), StartOffset: -1, Epoch: -3},
		// Created at the Unix epoch: both time fields are 0, and a set
		// time must not come back unset (zero time.Time is year 1).
		{Name: "/epoch", ID: 3, CreatedAt: time.Unix(0, 0).UTC()},
	}
}

// TestStreamRecordRoundTrip: every field survives encode/decode. Records
// of earlier versions (JSON) are read from a checked-in file by
// TestSampleStreamRecordLegacyJSON, not built from today's type.
func TestStreamRecordRoundTrip(t *testing.T) {
	for _, s := range recordExamples() {
		got, err := decodeStreamValue(s.Name, encodeStream(s))
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%s: round trip = %+v, want %+v", s.Name, got, s)
		}
	}
}

// TestStreamRecordIsCompact holds a typical idle stream's record to a
// size budget: no name (the key holds it), a derived topic as a flag.
func TestStreamRecordIsCompact(t *testing.T) {
	s := recordExamples()[0]
	b := encodeStream(s)
	legacy, _ := json.Marshal(s)
	if len(b) > 56 {
		t.Errorf("typical record is %d bytes (JSON was %d), want <= 56", len(b), len(legacy))
	}
	if e := EncodeTopicEntry(TopicEntry{Stream: s.Name, ID: s.ID}); len(e) > len(s.Name)+8 {
		t.Errorf("topic entry is %d bytes", len(e))
	}
}

func TestStreamRecordRejectsGarbage(t *testing.T) {
	for _, v := range [][]byte{nil, {}, []byte("{not json"), {0x08}, {0x12, 0x05, 'a'}, {0x0a, 0x01, 'x'}} {
		if s, err := decodeStreamValue("/x", v); err == nil {
			t.Errorf("decode(%q) = %+v, want an error", v, s)
		}
	}
	if _, err := decodeStreamValue("/y", []byte(`{"name":"/x","id":1}`)); err == nil {
		t.Error("a JSON record naming another stream decoded")
	}
}

func TestStreamRecordSkipsUnknownFields(t *testing.T) {
	s := recordExamples()[1]
	b := encodeStream(s)
	b = appendString(b, 99, "added later")
	b = appendVarint(b, 100, 5)
	b = protowire.AppendTag(b, 101, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	got, err := decodeStreamValue(s.Name, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("with unknown fields = %+v, want %+v", got, s)
	}
}

func TestTopicEntryRoundTrip(t *testing.T) {
	e := TopicEntry{Stream: "/a/b", ID: 9}
	for _, v := range [][]byte{EncodeTopicEntry(e), []byte(`{"stream":"/a/b","id":9}`)} {
		got, err := DecodeTopicEntry(v)
		if err != nil || got != e {
			t.Errorf("decode(%q) = %+v, %v", v, got, err)
		}
	}
}

// FuzzDecodeStreamValue: no input panics the decoder, and whatever decodes
// from the compact format encodes back to a record that decodes the same.
func FuzzDecodeStreamValue(f *testing.F) {
	for _, s := range recordExamples() {
		f.Add(s.Name, encodeStream(s))
		legacy, _ := json.Marshal(s)
		f.Add(s.Name, legacy)
	}
	f.Fuzz(func(t *testing.T, name string, v []byte) {
		s, err := decodeStreamValue(name, v)
		if err != nil || (len(v) > 0 && v[0] == jsonFirstByte) {
			return
		}
		again, err := decodeStreamValue(name, encodeStream(s))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoded %+v decodes to %+v", s, again)
		}
	})
}

func FuzzDecodeTopicEntry(f *testing.F) {
	f.Add(EncodeTopicEntry(TopicEntry{Stream: "/a", ID: 1}))
	f.Add([]byte(`{"stream":"/a","id":1}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := DecodeTopicEntry(v)
		if err != nil || (len(v) > 0 && v[0] == jsonFirstByte) {
			return
		}
		again, err := DecodeTopicEntry(EncodeTopicEntry(e))
		if err != nil || again != e {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", e, again, err)
		}
	})
}
