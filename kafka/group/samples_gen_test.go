//go:build picomq_samples

package group

// The generator of testdata/formats/offsets-batch.bin, run once by hand
// when the offsets record format gains a version:
//
//	go test -tags picomq_samples -run '^TestWriteSamples$' ./kafka/group/
//
// Behind a build tag so no test run rewrites what TestSampleOffsetsBatch reads.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

func TestWriteSamples(t *testing.T) {
	meta := "checkpoint-7"
	changes := []change{
		{p: tp{topic: "orders.eu", partition: 0}, c: committed{offset: 1234, epoch: 5, metadata: &meta, at: 1764621000999}},
		{p: tp{topic: "orders.eu", partition: 3}, c: committed{offset: 0, epoch: -1, at: 1764621001000}},
		{p: tp{topic: "gone", partition: 1}, c: committed{offset: 9, epoch: 2, at: 1764621000000}},
		{p: tp{topic: "gone", partition: 1}, del: true},
	}
	recs := make([]record.Record, len(changes))
	for i, ch := range changes {
		recs[i] = ch.record()
	}
	b := record.AppendBatch(nil, record.BatchOptions{BaseOffset: 0, Timestamp: 1764621001000, ProducerID: -1}, recs)
	if err := os.WriteFile(filepath.Join("testdata", "formats", "offsets-batch.bin"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
