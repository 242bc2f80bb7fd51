package stream

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// The stream service's persisted formats — its WAL entries and the state
// snapshot it stores in each manifest — pinned by samples in
// testdata/formats that samples_gen_test.go wrote once. Each test compares
// the decoded value field by field with values written here.

func readSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "formats", name))
	if err != nil {
		t.Fatalf("%v (written once by: go test -tags picomq_samples -run TestWriteSamples ./node/stream/)", err)
	}
	return b
}

func check[T comparable](t *testing.T, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

func TestSampleEntryWithProducerAndBatch(t *testing.T) {
	e, err := decodeEntry(readSample(t, "entry-producer-batch.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "streamID", e.streamID, 7)
	check(t, "flags", e.flags, flagProducer|flagWriterSeq)
	check(t, "producer", e.producer, Producer{ID: "pico:p1", Epoch: 2, Seq: 9})
	check(t, "writerSeq", e.writerSeq, "w-9")
	check(t, "hasBatch", e.hasBatch(), true)
	h, err := record.Validate(e.batch)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	check(t, "batch BaseOffset", h.BaseOffset, 40)
	check(t, "batch MaxTimestamp", h.MaxTimestamp, 1764621000999)
	recs, err := record.DecodeRecords(e.batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	check(t, "record 0 key", string(recs[0].Key), "k1")
	check(t, "record 0 value", string(recs[0].Value), `{"n":1}`)
	check(t, "record 1 offset", recs[1].Offset, 41)
	check(t, "record 1 value", string(recs[1].Value), `{"n":2}`)
}

func TestSampleEntryCloseWithoutBatch(t *testing.T) {
	e, err := decodeEntry(readSample(t, "entry-close-nobatch.bin"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "streamID", e.streamID, 7)
	check(t, "flags", e.flags, flagProducer|flagClose|flagNoBatch|flagRecordSeq)
	check(t, "producer", e.producer, Producer{ID: "kafka:12", Epoch: 3, Seq: 100, PerRecord: true})
	check(t, "writerSeq", e.writerSeq, "")
	check(t, "hasBatch", e.hasBatch(), false)
}

// TestSampleStateSnapshot restores the snapshot a manifest holds into a
// stream's state.
func TestSampleStateSnapshot(t *testing.T) {
	st := &streamState{}
	if err := st.restoreSnapshot(readSample(t, "state-snapshot.json")); err != nil {
		t.Fatal(err)
	}
	check(t, "lastTS", st.lastTS, 1764621000999)
	check(t, "writerSeq", st.writerSeq, "w-9")
	check(t, "closed", st.closed, true)
	if st.closedBy == nil {
		t.Fatal("closedBy = nil")
	}
	check(t, "closedBy", *st.closedBy, Producer{ID: "ds:closer", Epoch: 1, Seq: 4})
	ps := st.producers["pico:p1"]
	if len(st.producers) != 1 || ps == nil {
		t.Fatalf("producers = %v, want pico:p1 only", st.producers)
	}
	check(t, "epoch", ps.epoch, 2)
	check(t, "lastSeq", ps.lastSeq, 9)
	check(t, "recent", ps.n, 2)
	for i, want := range []sentBatch{{seq: 8, first: 130, next: 140, ts: 1764621000500}, {seq: 9, first: 140, next: 150, ts: 1764621000999}} {
		check(t, "recent batch", ps.recent[i], want)
	}
}
