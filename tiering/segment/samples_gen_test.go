//go:build picomq_samples

package segment

// The generator of testdata/formats/object.seg, run once by hand when the
// object format gains a version:
//
//	go test -tags picomq_samples -run '^TestWriteSamples$' ./tiering/segment/
//
// Behind a build tag so no test run rewrites what TestSampleObject reads.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

func TestWriteSamples(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{IndexInterval: -1})
	for _, b := range sampleBatches() {
		if err := w.Append(b.stream, record.AppendBatch(nil, record.BatchOptions{
			BaseOffset: b.base, Timestamp: b.ts, ProducerID: -1}, b.records())); err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", info)
	if err := os.WriteFile(filepath.Join("testdata", "formats", "object.seg"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
