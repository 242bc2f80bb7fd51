package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// fuzzSeg is the segment number fuzz inputs are read as. The committed
// corpus in testdata/fuzz/FuzzReader was framed for it.
const fuzzSeg = 1

// refRecordAt is a deliberately naive re-implementation of the record
// format, sharing no code with the reader: it returns the size of the valid
// record starting at data[off:], or ok=false.
func refRecordAt(data []byte, off int) (size int, ok bool) {
	if off+headerSize > len(data) || data[off] != 1 {
		return 0, false
	}
	h := data[off : off+headerSize]
	salted := binary.LittleEndian.AppendUint64(nil, fuzzSeg)
	salted = append(salted, h[:9]...)
	if crc32.Checksum(salted, crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(h[9:]) {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(h[1:]))
	if n > MaxEntrySize || n > len(data)-off-headerSize {
		return 0, false
	}
	p := data[off+headerSize : off+headerSize+n]
	if crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(h[5:]) {
		return 0, false
	}
	return headerSize + n, true
}

// refFrame frames payload as a record of segment seg, written from the
// package documentation's record layout without the writer's header code
// (putHeader), so a change to the writer cannot change the images the
// tests read as well.
func refFrame(dst []byte, seg uint64, payload []byte) []byte {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	h := []byte{0x01}
	h = binary.LittleEndian.AppendUint32(h, uint32(len(payload)))
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(payload, castagnoli))
	salted := append(binary.LittleEndian.AppendUint64(nil, seg), h...)
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(salted, castagnoli))
	return append(append(dst, h...), payload...)
}

// FuzzReader feeds arbitrary bytes to recovery as a segment file. It must
// never panic, and must either accept a clean prefix of valid records —
// followed only by zeros or by bytes that contain no valid record — or
// report ErrCorrupt because a valid record follows damage. The reference
// parser above decides which, by brute force.
func FuzzReader(f *testing.F) {
	two := refFrame(refFrame(nil, fuzzSeg, []byte("hello")), fuzzSeg, []byte("world!"))
	f.Add([]byte{})
	f.Add(two)
	f.Add(append(bytes.Clone(two), make([]byte, 64)...))
	f.Add(two[:len(two)-3])
	f.Add(refFrame(append(bytes.Clone(two), 0xde, 0xad), fuzzSeg, []byte("after junk")))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			t.Skip("the brute-force reference is quadratic")
		}
		var win window
		sc, err := scanSegment(&win, bytes.NewReader(data), int64(len(data)), fuzzSeg)

		end, entries := 0, 0
		for {
			n, ok := refRecordAt(data, end)
			if !ok {
				break
			}
			end += n
			entries++
		}
		validAfter := -1
		for off := end + 1; off < len(data); off++ {
			if _, ok := refRecordAt(data, off); ok {
				validAfter = off
				break
			}
		}
		junkEnd := len(data)
		for junkEnd > end && data[junkEnd-1] == 0 {
			junkEnd--
		}

		if validAfter >= 0 {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("valid record at %d after damage at %d: got %v, want ErrCorrupt", validAfter, end, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("scan failed on a log with a clean prefix of %d bytes: %v", end, err)
		}
		if sc.end != int64(end) || sc.entries != entries || sc.junkEnd != int64(junkEnd) {
			t.Fatalf("scan = {end %d, entries %d, junkEnd %d}, reference {%d, %d, %d}",
				sc.end, sc.entries, sc.junkEnd, end, entries, junkEnd)
		}
		// Replaying the prefix and framing it again must reproduce it
		// byte for byte: nothing skipped, nothing invented.
		var rebuilt []byte
		win.reset(bytes.NewReader(data), int64(len(data)))
		if _, _, _, err := walk(&win, fuzzSeg, sc.end, func(_ int64, p []byte) error {
			rebuilt = refFrame(rebuilt, fuzzSeg, p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rebuilt, data[:end]) {
			t.Fatal("replayed prefix does not re-encode to the input")
		}
	})
}
