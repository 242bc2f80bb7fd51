//go:build picomq_samples

package wal

// The generator of testdata/formats/segment-1.wal, run once by hand when
// the record format gains a version:
//
//	go test -tags picomq_samples -run '^TestWriteSamples$' ./wal/
//
// Behind a build tag so no test run rewrites what TestSampleSegment reads.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteSamples(t *testing.T) {
	dir := t.TempDir()
	w, _, err := Open(Options{Dir: dir, SegmentSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range samplePayloads {
		if _, err := w.Append(context.Background(), []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "formats", "segment-1.wal"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
