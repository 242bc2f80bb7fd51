package wal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// samplePayloads are the entries of testdata/formats/segment-1.wal, a
// segment file the log wrote (samples_gen_test.go) and that every later
// version must read.
var samplePayloads = []string{"first entry", "", "third: \x00\x01\xff binary"}

func readSegmentSample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "formats", "segment-1.wal"))
	if err != nil {
		t.Fatalf("%v (written once by: go test -tags picomq_samples -run TestWriteSamples ./wal/)", err)
	}
	return b
}

// TestSampleSegmentLayout reads the checked-in segment byte by byte as the
// package documentation lays it out (no reader or writer code): kind,
// length, payload CRC-32C, header CRC-32C over the segment number and the
// first nine header bytes, payload; then zeros to the preallocated end.
func TestSampleSegmentLayout(t *testing.T) {
	b := readSegmentSample(t)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	off := 0
	for i, want := range samplePayloads {
		if len(b) < off+13 {
			t.Fatalf("record %d: file ends at %d", i, len(b))
		}
		h := b[off : off+13]
		if h[0] != 0x01 {
			t.Errorf("record %d: kind %#x, want 0x01", i, h[0])
		}
		n := int(binary.LittleEndian.Uint32(h[1:5]))
		if n != len(want) {
			t.Fatalf("record %d: length %d, want %d", i, n, len(want))
		}
		p := b[off+13 : off+13+n]
		if string(p) != want {
			t.Errorf("record %d: payload %q, want %q", i, p, want)
		}
		if got, want := binary.LittleEndian.Uint32(h[5:9]), crc32.Checksum(p, castagnoli); got != want {
			t.Errorf("record %d: payload CRC %#x, want %#x", i, got, want)
		}
		salted := append(binary.LittleEndian.AppendUint64(nil, 1), h[:9]...)
		if got, want := binary.LittleEndian.Uint32(h[9:13]), crc32.Checksum(salted, castagnoli); got != want {
			t.Errorf("record %d: header CRC %#x, want %#x", i, got, want)
		}
		off += 13 + n
	}
	if !bytes.Equal(b[off:], make([]byte, len(b)-off)) {
		t.Errorf("bytes after the last record are not all zero")
	}
	if len(b) != 256 {
		t.Errorf("segment file of %d bytes, want the preallocated 256", len(b))
	}
}

// TestSampleSegmentReplay opens a log holding the checked-in segment and
// replays it: today's reader must return every entry at its position.
func TestSampleSegmentReplay(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.wal"), readSegmentSample(t), 0o644); err != nil {
		t.Fatal(err)
	}
	w, rep := openWAL(t, dir, 256)
	if rep.TornBytes != 0 || rep.Entries != len(samplePayloads) {
		t.Errorf("recovery found %d entries and a torn tail of %d bytes, want %d and 0", rep.Entries, rep.TornBytes, len(samplePayloads))
	}
	var got []string
	var pos []Pos
	if err := w.Replay(func(p Pos, data []byte) error {
		got = append(got, string(data))
		pos = append(pos, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(samplePayloads) {
		t.Fatalf("replayed %d entries %q, want %q", len(got), got, samplePayloads)
	}
	off := int64(0)
	for i, want := range samplePayloads {
		if got[i] != want {
			t.Errorf("entry %d = %q, want %q", i, got[i], want)
		}
		wantPos := Pos{Segment: 1, Offset: off + 13, Len: int32(len(want))}
		if pos[i] != wantPos {
			t.Errorf("entry %d at %+v, want %+v", i, pos[i], wantPos)
		}
		off += 13 + int64(len(want))
	}
}
