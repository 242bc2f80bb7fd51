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
	"fmt"
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

// sampleBatch is one batch of testdata/formats/object.seg, an object the
// Writer produced once (this file): its values are "s<stream>-
// <offset>", so the test knows every byte it must read back.
type sampleBatch struct {
	stream uint64
	base   int64
	n      int
	ts     int64
}

func (b sampleBatch) records() []record.Record {
	recs := make([]record.Record, b.n)
	for i := range recs {
		recs[i].Value = fmt.Appendf(nil, "s%d-%d", b.stream, b.base+int64(i))
	}
	return recs
}

func sampleBatches() []sampleBatch {
	return []sampleBatch{
		{stream: 3, base: 100, n: 2, ts: 1764621000000},
		{stream: 3, base: 102, n: 1, ts: 1764621000500},
		{stream: 8, base: 0, n: 3, ts: 1764621000999},
	}
}
