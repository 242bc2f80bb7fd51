//go:build picomq_samples

package stream

// The generator of the stream service's format samples in
// testdata/formats, run once by hand when a format gains a version:
//
//	go test -tags picomq_samples -run '^TestWriteSamples$' ./node/stream/
//
// Behind a build tag so no test run rewrites what samples_test.go reads.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

func TestWriteSamples(t *testing.T) {
	batch := record.AppendBatch(nil, record.BatchOptions{BaseOffset: 40, Timestamp: 1764621000999, ProducerID: -1},
		[]record.Record{{Key: []byte("k1"), Value: []byte(`{"n":1}`)}, {Value: []byte(`{"n":2}`)}})
	withProducer := append(appendEntryHeader(nil, 7, &Producer{ID: "pico:p1", Epoch: 2, Seq: 9}, "w-9", false, false), batch...)
	closing := appendEntryHeader(nil, 7, &Producer{ID: "kafka:12", Epoch: 3, Seq: 100, PerRecord: true}, "", true, true)

	st := &streamState{lastTS: 1764621000999, writerSeq: "w-9", closed: true,
		closedBy: &Producer{ID: "ds:closer", Epoch: 1, Seq: 4}}
	ps := &producerState{epoch: 2, lastSeq: 9}
	ps.remember(sentBatch{seq: 8, first: 130, next: 140, ts: 1764621000500})
	ps.remember(sentBatch{seq: 9, first: 140, next: 150, ts: 1764621000999})
	st.producers = map[string]*producerState{"pico:p1": ps}

	for name, b := range map[string][]byte{
		"entry-producer-batch.bin": withProducer,
		"entry-close-nobatch.bin":  closing,
		"state-snapshot.json":      st.snapshotLocked(),
	} {
		if err := os.WriteFile(filepath.Join("testdata", "formats", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
