package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// legacyEntry encodes one magic 0/1 message set entry, as a pre-0.11
// producer writes it.
func legacyEntry(offset int64, magic, attrs byte, ts int64, key, value []byte) []byte {
	msg := []byte{0, 0, 0, 0, magic, attrs}
	if magic == 1 {
		msg = binary.BigEndian.AppendUint64(msg, uint64(ts))
	}
	for _, f := range [][]byte{key, value} {
		if f == nil {
			msg = binary.BigEndian.AppendUint32(msg, 0xffffffff)
			continue
		}
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(f)))
		msg = append(msg, f...)
	}
	binary.BigEndian.PutUint32(msg, crc32.ChecksumIEEE(msg[4:]))
	out := binary.BigEndian.AppendUint64(nil, uint64(offset))
	out = binary.BigEndian.AppendUint32(out, uint32(len(msg)))
	return append(out, msg...)
}

func gzipped(t testing.TB, b []byte) []byte {
	return compressWith(t, CodecGzip, b, false, false)
}

// legacySeeds are message sets of each shape: magic 0, magic 1, a gzip
// wrapper (CreateTime) and a LogAppendTime wrapper.
func legacySeeds(t testing.TB) map[string][]byte {
	m0 := append(legacyEntry(0, 0, 0, 0, []byte("k0"), []byte("v0")), legacyEntry(1, 0, 0, 0, nil, []byte("v1"))...)
	m1 := append(legacyEntry(0, 1, 0, 1000, []byte("k"), []byte("a")), legacyEntry(1, 1, 0, 1005, nil, nil)...)
	inner := append(legacyEntry(0, 1, 0, 2000, []byte("x"), []byte("in0")), legacyEntry(1, 1, 0, 2003, nil, []byte("in1"))...)
	return map[string][]byte{
		"magic0":    m0,
		"magic1":    m1,
		"gzip":      legacyEntry(1, 1, byte(CodecGzip), 2003, nil, gzipped(t, inner)),
		"logappend": legacyEntry(1, 1, byte(CodecGzip)|0x08, 7777, nil, gzipped(t, inner)),
	}
}

// TestUpconvertLegacy: each legacy shape becomes one valid RecordBatch v2
// with the same keys and values, magic 1 timestamps as CreateTime.
func TestUpconvertLegacy(t *testing.T) {
	const now = 5_000
	seeds := legacySeeds(t)
	for _, tc := range []struct {
		name   string
		keys   []string // "" = null
		values []string
		ts     []int64
	}{
		{"magic0", []string{"k0", ""}, []string{"v0", "v1"}, []int64{now, now}},
		{"magic1", []string{"k", ""}, []string{"a", ""}, []int64{1000, 1005}},
		{"gzip", []string{"x", ""}, []string{"in0", "in1"}, []int64{2000, 2003}},
		{"logappend", []string{"x", ""}, []string{"in0", "in1"}, []int64{7777, 7777}},
	} {
		in := seeds[tc.name]
		if !IsLegacy(in) {
			t.Fatalf("%s: not recognised as legacy", tc.name)
		}
		b, err := UpconvertLegacy(nil, in, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if IsLegacy(b) {
			t.Fatalf("%s: output still legacy", tc.name)
		}
		h, err := Validate(b)
		if err != nil || h.LogAppendTime() || h.NumRecords != int32(len(tc.values)) {
			t.Fatalf("%s: header %+v, %v", tc.name, h, err)
		}
		recs, err := DecodeRecords(b, nil)
		if err != nil || len(recs) != len(tc.values) {
			t.Fatalf("%s: %d records, %v", tc.name, len(recs), err)
		}
		for i, r := range recs {
			if (tc.keys[i] == "") != (r.Key == nil) || string(r.Key) != tc.keys[i] || string(r.Value) != tc.values[i] || r.Timestamp != tc.ts[i] || r.Offset != int64(i) {
				t.Errorf("%s record %d: offset %d key %q value %q ts %d; want key %q value %q ts %d", tc.name, i, r.Offset, r.Key, r.Value, r.Timestamp, tc.keys[i], tc.values[i], tc.ts[i])
			}
		}
	}
	bad := bytes.Clone(seeds["magic1"])
	bad[len(bad)-1] ^= 1
	if _, err := UpconvertLegacy(nil, bad, now); !errors.Is(err, ErrBadCRC) {
		t.Errorf("flipped byte: %v, want ErrBadCRC", err)
	}
	if _, err := UpconvertLegacy(nil, seeds["magic1"][:20], now); !errors.Is(err, ErrTruncated) {
		t.Errorf("cut set: %v, want ErrTruncated", err)
	}
	nested := legacyEntry(0, 1, byte(CodecGzip), 1, nil, gzipped(t, seeds["gzip"]))
	if _, err := UpconvertLegacy(nil, nested, now); !errors.Is(err, ErrUnsupportedCodec) {
		t.Errorf("nested wrapper: %v, want ErrUnsupportedCodec", err)
	}
}

// FuzzUpconvertLegacy: no panic on any input; every error is an
// ErrInvalid; a success is a valid v2 batch.
func FuzzUpconvertLegacy(f *testing.F) {
	for _, s := range legacySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := UpconvertLegacy(nil, data, 1)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not an ErrInvalid", err)
			}
			return
		}
		if _, err := DecodeRecords(b, nil); err != nil {
			t.Fatalf("converted batch does not decode: %v", err)
		}
	})
}

// TestUpconvertLegacyOldLZ4: magic-0 producers write LZ4 frames whose
// header checksum covers the frame magic too (KAFKA-3160); such a wrapper
// is read, and the checksum computed here matches the LZ4 library's.
func TestUpconvertLegacyOldLZ4(t *testing.T) {
	inner := append(legacyEntry(0, 0, 0, 0, []byte("k"), []byte("lz0")), legacyEntry(1, 0, 0, 0, nil, []byte("lz1"))...)
	frame := compressWith(t, CodecLZ4, inner, false, false)
	n := 2
	if frame[4]&0x08 != 0 {
		n += 8
	}
	if got, want := byte(xxh32(frame[4:4+n])>>8), frame[4+n]; got != want {
		t.Fatalf("header checksum %#x, the LZ4 writer's %#x", got, want)
	}
	old := bytes.Clone(frame)
	old[4+n] = byte(xxh32(old[:4+n]) >> 8) // the pre-KIP-57 checksum
	if old[4+n] == frame[4+n] {
		t.Skip("the wrong checksum happens to equal the right one for this frame")
	}
	if _, err := UpconvertLegacy(nil, legacyEntry(0, 1, byte(CodecLZ4), 1, nil, old), 9); err == nil {
		t.Fatal("magic 1 with a pre-KIP-57 LZ4 checksum was accepted")
	}
	b, err := UpconvertLegacy(nil, legacyEntry(0, 0, byte(CodecLZ4), 0, nil, old), 9)
	if err != nil {
		t.Fatalf("magic 0 LZ4 wrapper: %v", err)
	}
	recs, err := DecodeRecords(b, nil)
	if err != nil || len(recs) != 2 || string(recs[0].Value) != "lz0" || string(recs[1].Value) != "lz1" {
		t.Fatalf("records %+v, %v", recs, err)
	}
}
