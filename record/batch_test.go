package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func threeRecordBatch() []byte {
	return AppendBatch(nil, BatchOptions{BaseOffset: 10, Timestamp: 1_700_000_000_000, ProducerID: -1},
		[]Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}})
}

func TestParseHeaderReadsEveryField(t *testing.T) {
	b := buildKmsg(t, kbatch{
		codec:       CodecLZ4,
		attrs:       attrLogAppendTime | attrTransactional,
		baseOffset:  1234567890123,
		leaderEpoch: 77,
		firstTS:     1_600_000_000_000,
		maxTS:       1_600_000_000_999,
		producerID:  4242,
		epoch:       3,
		seq:         99,
		recs:        toKmsg(sampleRecords(), nil),
	})
	h, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	want := BatchHeader{
		BaseOffset: kb.FirstOffset, Length: kb.Length, PartitionLeaderEpoch: kb.PartitionLeaderEpoch,
		Magic: kb.Magic, CRC: uint32(kb.CRC), Attributes: kb.Attributes, LastOffsetDelta: kb.LastOffsetDelta,
		FirstTimestamp: kb.FirstTimestamp, MaxTimestamp: kb.MaxTimestamp, ProducerID: kb.ProducerID,
		ProducerEpoch: kb.ProducerEpoch, BaseSequence: kb.FirstSequence, NumRecords: kb.NumRecords,
	}
	if h != want {
		t.Fatalf("header\n got %+v\nwant %+v", h, want)
	}
	if h.Codec() != CodecLZ4 || !h.LogAppendTime() || !h.Transactional() || h.Control() {
		t.Errorf("flags: codec %v logAppend %v txn %v control %v", h.Codec(), h.LogAppendTime(), h.Transactional(), h.Control())
	}
	if h.Size() != len(b) {
		t.Errorf("Size() = %d, want %d", h.Size(), len(b))
	}
	if got, want := h.LastOffset(), int64(1234567890123+len(sampleRecords())-1); got != want {
		t.Errorf("LastOffset() = %d, want %d", got, want)
	}
}

func TestParseHeaderRejects(t *testing.T) {
	be := binary.BigEndian
	tests := []struct {
		name   string
		edit   func([]byte) []byte
		kind   error
		offset int
	}{
		{"empty input", func(b []byte) []byte { return nil }, ErrTruncated, 0},
		{"header cut short", func(b []byte) []byte { return b[:HeaderSize-1] }, ErrTruncated, HeaderSize - 1},
		{"magic 1", func(b []byte) []byte { b[16] = 1; return b }, ErrBadMagic, 16},
		{"magic 0 in a short message set", func(b []byte) []byte { b[16] = 0; return b[:26] }, ErrBadMagic, 16},
		{"codec 5", func(b []byte) []byte { b[22] |= 5; return b }, ErrUnsupportedCodec, 21},
		{"codec 7", func(b []byte) []byte { b[22] |= 7; return b }, ErrUnsupportedCodec, 21},
		{"length below header", func(b []byte) []byte { be.PutUint32(b[8:], 48); return b }, ErrCorrupt, 8},
		{"negative length", func(b []byte) []byte { be.PutUint32(b[8:], math.MaxUint32); return b }, ErrCorrupt, 8},
		{"zero records and a negative span", func(b []byte) []byte {
			be.PutUint32(b[57:], 0)
			be.PutUint32(b[23:], math.MaxUint32)
			return b
		}, ErrCorrupt, 23},
		{"negative record count", func(b []byte) []byte { be.PutUint32(b[57:], math.MaxUint32); return b }, ErrCorrupt, 57},
		{"more records than offsets", func(b []byte) []byte { be.PutUint32(b[57:], be.Uint32(b[23:])+2); return b }, ErrCorrupt, 23},
		{"negative base offset", func(b []byte) []byte { be.PutUint64(b[0:], math.MaxUint64); return b }, ErrCorrupt, 0},
		{"last offset overflows", func(b []byte) []byte { be.PutUint64(b[0:], math.MaxInt64-1); return b }, ErrCorrupt, 0},
		{"more records than bytes", func(b []byte) []byte {
			be.PutUint32(b[57:], 1000)
			be.PutUint32(b[23:], 999)
			return b
		}, ErrCorrupt, 57},
		{"transactional without producer id", func(b []byte) []byte { b[22] |= attrTransactional; return b }, ErrCorrupt, 43},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.edit(threeRecordBatch())
			_, err := ParseHeader(b)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("ParseHeader error %v, want *Error", err)
			}
			if !errors.Is(err, tt.kind) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q is not %v within ErrInvalid", err, tt.kind)
			}
			if e.Offset != tt.offset {
				t.Errorf("error at byte %d, want %d: %v", e.Offset, tt.offset, err)
			}
			if _, verr := Validate(b); !errors.Is(verr, tt.kind) {
				t.Errorf("Validate error %v, want %v", verr, tt.kind)
			}
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	be := binary.BigEndian
	tests := []struct {
		name string
		edit func([]byte) []byte
	}{
		{"as encoded", func(b []byte) []byte { return b }},
		{"header only, records not looked at", func(b []byte) []byte { return b[:HeaderSize] }},
		{"last offset exactly MaxInt64", func(b []byte) []byte { be.PutUint64(b[0:], math.MaxInt64-2); return b }},
		// Compressed records can be far smaller than 7 bytes each; the
		// count is checked after decompression instead.
		{"compressed, many records in few bytes", func(b []byte) []byte {
			b[22] |= byte(CodecZstd)
			be.PutUint32(b[57:], 1000)
			be.PutUint32(b[23:], 999)
			return b
		}},
		{"unused attribute bits", func(b []byte) []byte { b[21] |= 0x80; return b }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseHeader(tt.edit(threeRecordBatch())); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidateSizeAndCRC(t *testing.T) {
	b := threeRecordBatch()
	if _, err := Validate(b); err != nil {
		t.Fatalf("valid batch: %v", err)
	}
	if _, err := Validate(b[:len(b)-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("one byte short: %v, want ErrTruncated", err)
	}
	if _, err := Validate(append(bytes.Clone(b), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("one byte extra: %v, want ErrCorrupt", err)
	}
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 1
	_, err := Validate(bad)
	if !errors.Is(err, ErrBadCRC) || !strings.Contains(err.Error(), "computed") {
		t.Errorf("flipped last byte: %v, want ErrBadCRC naming both checksums", err)
	}
}

// TestCorruptionAtEveryBit flips every bit of a small batch in turn. Inside
// the CRC'd region nothing may decode; in the header fields before it the
// outcome must be an error or the same records (a broker rewrites those
// fields, so they are deliberately unprotected).
func TestCorruptionAtEveryBit(t *testing.T) {
	recs := []Record{
		{Key: []byte("k"), Value: []byte("value"), Headers: []Header{{Key: "h", Value: []byte("v")}}},
		{Key: nil, Value: []byte{}},
	}
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			orig := buildKmsg(t, kbatch{codec: codec, producerID: -1, epoch: -1, seq: -1, firstTS: 5, maxTS: 5, recs: toKmsg(recs, nil)})
			want := mustDecode(t, orig)
			for pos := range orig {
				for bit := range 8 {
					b := bytes.Clone(orig)
					b[pos] ^= 1 << bit
					got, err := DecodeRecords(b, nil)
					switch {
					case pos >= offAttributes:
						if err == nil {
							t.Fatalf("byte %d bit %d: corrupted batch decoded", pos, bit)
						}
					case pos >= offCRC:
						if !errors.Is(err, ErrBadCRC) {
							t.Fatalf("byte %d bit %d (CRC field): %v, want ErrBadCRC", pos, bit, err)
						}
					case pos == offMagic:
						if !errors.Is(err, ErrBadMagic) {
							t.Fatalf("byte %d bit %d (magic): %v, want ErrBadMagic", pos, bit, err)
						}
					case pos >= offLength && pos < offLeaderEpoch:
						if err == nil {
							t.Fatalf("byte %d bit %d (length): decoded", pos, bit)
						}
					default: // base offset, leader epoch: outside the CRC by design
						if err == nil {
							if d := diffRecordContent(got, want); d != "" {
								t.Fatalf("byte %d bit %d: decoded different records: %s", pos, bit, d)
							}
						}
					}
					if err != nil && !errors.Is(err, ErrInvalid) {
						t.Fatalf("byte %d bit %d: error %v outside ErrInvalid", pos, bit, err)
					}
				}
			}
		})
	}
}

// TestTruncationAtEveryLength cuts a batch at every length. The batch-level
// cut is caught by the length check; the second loop keeps length and CRC
// consistent so the cut reaches the decompressor and record parser.
func TestTruncationAtEveryLength(t *testing.T) {
	recs := manyRecords(7, 5, 40)
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			orig := buildKmsg(t, kbatch{codec: codec, producerID: -1, recs: toKmsg(recs, nil)})
			for n := range len(orig) {
				if _, err := DecodeRecords(orig[:n], nil); !errors.Is(err, ErrInvalid) {
					t.Fatalf("cut at %d: %v, want an ErrInvalid", n, err)
				}
				if _, err := Validate(orig[:n]); !errors.Is(err, ErrTruncated) && n > offMagic {
					t.Fatalf("Validate cut at %d: %v, want ErrTruncated", n, err)
				}
			}
			for n := HeaderSize; n < len(orig); n++ {
				b := bytes.Clone(orig[:n])
				fixLength(b)
				if _, err := DecodeRecords(b, nil); !errors.Is(err, ErrInvalid) {
					t.Fatalf("records cut to %d bytes with fixed CRC: %v, want an ErrInvalid", n-HeaderSize, err)
				}
			}
		})
	}
}

func TestSplitBatches(t *testing.T) {
	var payload []byte
	var sizes []int
	for i := range 3 {
		before := len(payload)
		payload = AppendBatch(payload, BatchOptions{BaseOffset: int64(100 * i), ProducerID: -1}, valueRecords(i+1, 10))
		sizes = append(sizes, len(payload)-before)
	}

	t.Run("three batches", func(t *testing.T) {
		var got [][]byte
		var counts []int32
		err := SplitBatches(payload, func(batch []byte, h BatchHeader) error {
			got = append(got, batch)
			counts = append(counts, h.NumRecords)
			if cap(batch) != len(batch) {
				t.Errorf("batch %d: capacity %d beyond its length %d", len(got)-1, cap(batch), len(batch))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("fn called %d times, want 3", len(got))
		}
		pos := 0
		for i, b := range got {
			if !bytes.Equal(b, payload[pos:pos+sizes[i]]) {
				t.Errorf("batch %d: wrong bytes", i)
			}
			if counts[i] != int32(i+1) {
				t.Errorf("batch %d: %d records, want %d", i, counts[i], i+1)
			}
			pos += sizes[i]
		}
	})

	t.Run("trailing partial batch rejects the whole payload", func(t *testing.T) {
		fourth := AppendBatch(nil, BatchOptions{ProducerID: -1}, valueRecords(1, 10))
		for _, cut := range []int{1, 12, HeaderSize, len(fourth) - 1} {
			calls := 0
			err := SplitBatches(append(bytes.Clone(payload), fourth[:cut]...), func([]byte, BatchHeader) error {
				calls++
				return nil
			})
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut %d: %v, want ErrTruncated", cut, err)
			}
			if e.Batch != 3 || e.Offset < len(payload) {
				t.Errorf("cut %d: error names batch %d at byte %d, want batch 3 at or after byte %d", cut, e.Batch, e.Offset, len(payload))
			}
			if calls != 0 {
				t.Errorf("cut %d: fn called %d times before the payload was known to be valid", cut, calls)
			}
		}
	})

	t.Run("bad CRC in the middle batch", func(t *testing.T) {
		b := bytes.Clone(payload)
		b[sizes[0]+HeaderSize] ^= 0xff
		calls := 0
		err := SplitBatches(b, func([]byte, BatchHeader) error { calls++; return nil })
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrBadCRC) || e.Batch != 1 || e.Offset != sizes[0]+offCRC {
			t.Fatalf("error %v, want ErrBadCRC in batch 1 at byte %d", err, sizes[0]+offCRC)
		}
		if calls != 0 {
			t.Errorf("fn called %d times", calls)
		}
	})

	t.Run("fn error stops the walk", func(t *testing.T) {
		stop := errors.New("stop")
		calls := 0
		err := SplitBatches(payload, func([]byte, BatchHeader) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		if err != stop || calls != 2 {
			t.Fatalf("err %v after %d calls, want the fn's error after 2", err, calls)
		}
	})

	t.Run("empty payload", func(t *testing.T) {
		if err := SplitBatches(nil, func([]byte, BatchHeader) error {
			t.Fatal("fn called for an empty payload")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSetBaseOffsetAndEpochKeepBatchValid(t *testing.T) {
	b := threeRecordBatch()
	SetBaseOffset(b, 5000)
	SetPartitionLeaderEpoch(b, 9)
	h, err := Validate(b)
	if err != nil {
		t.Fatalf("patched batch no longer valid: %v", err)
	}
	if h.BaseOffset != 5000 || h.PartitionLeaderEpoch != 9 {
		t.Fatalf("header after patch: base %d epoch %d", h.BaseOffset, h.PartitionLeaderEpoch)
	}
	recs := mustDecode(t, b)
	for i, r := range recs {
		if r.Offset != 5000+int64(i) {
			t.Errorf("record %d offset %d, want %d", i, r.Offset, 5000+i)
		}
	}
}

func TestErrorMessagesSayWhatAndWhere(t *testing.T) {
	var payload []byte
	payload = AppendBatch(payload, BatchOptions{ProducerID: -1}, valueRecords(1, 3))
	payload = AppendBatch(payload, BatchOptions{ProducerID: -1}, valueRecords(1, 3))
	second := len(payload) / 2
	payload[second+offMagic] = 1
	err := SplitBatches(payload, func([]byte, BatchHeader) error { return nil })
	want := "record: invalid record batch: unsupported magic: batch 1, byte " + strconv.Itoa(second+offMagic) + ": magic 1, want 2"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q\nwant  %q", err, want)
	}
	for _, kind := range []error{ErrTruncated, ErrBadMagic, ErrBadCRC, ErrCorrupt, ErrUnsupportedCodec, ErrTooLarge} {
		if !errors.Is(kind, ErrInvalid) {
			t.Errorf("%v does not match ErrInvalid", kind)
		}
		for _, other := range []error{ErrTruncated, ErrBadMagic, ErrBadCRC, ErrCorrupt, ErrUnsupportedCodec, ErrTooLarge} {
			if other != kind && errors.Is(kind, other) {
				t.Errorf("%v matches %v", kind, other)
			}
		}
	}
}

// TestWalkBatches: the same batches as SplitBatches for intact bytes; a
// bad CRC is not looked at (the caller verified the bytes on their way
// in), while framing is: a trailing partial batch is ErrTruncated naming
// the batch, after fn saw the whole ones before it.
func TestWalkBatches(t *testing.T) {
	var payload []byte
	for i := range 3 {
		payload = AppendBatch(payload, BatchOptions{BaseOffset: int64(100 * i), ProducerID: -1}, valueRecords(i+1, 10))
	}
	collect := func(b []byte, walk func([]byte, func([]byte, BatchHeader) error) error) ([][]byte, error) {
		var got [][]byte
		err := walk(b, func(batch []byte, h BatchHeader) error {
			if h.Size() != len(batch) || cap(batch) != len(batch) {
				t.Fatalf("batch of %d bytes (capacity %d) with header size %d", len(batch), cap(batch), h.Size())
			}
			got = append(got, batch)
			return nil
		})
		return got, err
	}
	split, err := collect(payload, SplitBatches)
	if err != nil {
		t.Fatal(err)
	}
	walked, err := collect(payload, WalkBatches)
	if err != nil || len(walked) != 3 {
		t.Fatalf("walk: %d batches, %v; want 3", len(walked), err)
	}
	for i := range split {
		if !bytes.Equal(split[i], walked[i]) {
			t.Fatalf("batch %d differs from SplitBatches'", i)
		}
	}

	badCRC := bytes.Clone(payload)
	badCRC[len(split[0])+HeaderSize] ^= 0xff
	if _, err := collect(badCRC, SplitBatches); !errors.Is(err, ErrBadCRC) {
		t.Fatalf("SplitBatches of a damaged record: %v, want ErrBadCRC", err)
	}
	if got, err := collect(badCRC, WalkBatches); err != nil || len(got) != 3 {
		t.Fatalf("WalkBatches of a damaged record: %d batches, %v; want 3 and no CRC check", len(got), err)
	}

	cut := append(bytes.Clone(payload), split[0][:HeaderSize+3]...)
	got, err := collect(cut, WalkBatches)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrTruncated) || e.Batch != 3 || e.Offset < len(payload) {
		t.Fatalf("trailing partial batch: %v, want ErrTruncated naming batch 3 at or after byte %d", err, len(payload))
	}
	if len(got) != 3 {
		t.Fatalf("fn saw %d whole batches before the partial one, want 3", len(got))
	}
}
