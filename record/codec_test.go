package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		recs []Record
	}{
		{"one record", []Record{{Key: []byte("k"), Value: []byte("v")}}},
		{"null and empty keys and values, headers", sampleRecords()},
		{"many records", manyRecords(1, 2000, 64)},
		{"large values", valueRecords(3, 1<<20)},
		{"value needing a 3-byte length", valueRecords(1, 20000)},
		{"many headers", []Record{{Value: []byte("v"), Headers: func() []Header {
			hs := make([]Header, 300)
			for i := range hs {
				hs[i] = Header{Key: strings.Repeat("k", i%7), Value: bytes.Repeat([]byte{'v'}, i%5)}
			}
			return hs
		}()}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := BatchOptions{BaseOffset: 1 << 40, Timestamp: 1_700_000_123_456, ProducerID: 7, ProducerEpoch: 2, BaseSequence: 30}
			b := AppendBatch(nil, opts, tt.recs)
			h, err := Validate(b)
			if err != nil {
				t.Fatal(err)
			}
			if int(h.NumRecords) != len(tt.recs) || h.Size() != len(b) {
				t.Fatalf("header count %d size %d, want %d and %d", h.NumRecords, h.Size(), len(tt.recs), len(b))
			}
			got := mustDecode(t, b)
			if d := diffRecordContent(got, tt.recs); d != "" {
				t.Fatal(d)
			}
			for i, r := range got {
				if r.Offset != opts.BaseOffset+int64(i) || r.Timestamp != opts.Timestamp {
					t.Fatalf("record %d: offset %d timestamp %d, want %d and %d", i, r.Offset, r.Timestamp, opts.BaseOffset+int64(i), opts.Timestamp)
				}
			}
		})
	}
}

func TestAppendBatchHeader(t *testing.T) {
	t.Run("idempotent producer", func(t *testing.T) {
		b := AppendBatch(nil, BatchOptions{BaseOffset: 3, Timestamp: 99, ProducerID: 12, ProducerEpoch: 4, BaseSequence: 56}, sampleRecords())
		h, err := Validate(b)
		if err != nil {
			t.Fatal(err)
		}
		want := BatchHeader{BaseOffset: 3, Length: int32(len(b) - 12), PartitionLeaderEpoch: 0, Magic: 2, CRC: h.CRC,
			Attributes: attrLogAppendTime, LastOffsetDelta: int32(len(sampleRecords()) - 1), FirstTimestamp: 99, MaxTimestamp: 99,
			ProducerID: 12, ProducerEpoch: 4, BaseSequence: 56, NumRecords: int32(len(sampleRecords()))}
		if h != want {
			t.Fatalf("header\n got %+v\nwant %+v", h, want)
		}
		if !h.LogAppendTime() || h.Codec() != CodecNone || h.Transactional() || h.Control() {
			t.Errorf("flags of an HTTP append: %+v", h)
		}
	})
	t.Run("no producer writes -1 epoch and sequence", func(t *testing.T) {
		b := AppendBatch(nil, BatchOptions{ProducerID: -1, ProducerEpoch: 5, BaseSequence: 6}, sampleRecords())
		h, _ := ParseHeader(b)
		if h.ProducerID != -1 || h.ProducerEpoch != -1 || h.BaseSequence != -1 {
			t.Fatalf("producer fields %d/%d/%d, want -1/-1/-1", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
	})
	t.Run("appends after existing bytes", func(t *testing.T) {
		prefix := []byte("prefix")
		b := AppendBatch(bytes.Clone(prefix), BatchOptions{ProducerID: -1}, sampleRecords())
		if !bytes.HasPrefix(b, prefix) {
			t.Fatal("prefix overwritten")
		}
		if _, err := Validate(b[len(prefix):]); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("zero records leave dst unchanged", func(t *testing.T) {
		dst := []byte("x")
		if got := AppendBatch(dst, BatchOptions{}, nil); !bytes.Equal(got, dst) {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("exact capacity is enough", func(t *testing.T) {
		recs := manyRecords(2, 50, 300)
		size := len(AppendBatch(nil, BatchOptions{ProducerID: -1}, recs))
		dst := make([]byte, 3, 3+size)
		b := AppendBatch(dst, BatchOptions{ProducerID: -1}, recs)
		if len(b) != 3+size || unsafe.SliceData(b) != unsafe.SliceData(dst) {
			t.Errorf("len %d cap %d: reallocated although dst had room for exactly %d bytes", len(b), cap(b), size)
		}
	})
}

// TestAppendBatchParsedByKmsg checks the encoder against kmsg's independent
// parser: every header field, the CRC, and every record field.
func TestAppendBatchParsedByKmsg(t *testing.T) {
	recs := append(sampleRecords(), manyRecords(3, 200, 300)...)
	opts := BatchOptions{BaseOffset: 77, Timestamp: 1_650_000_000_000, ProducerID: 99, ProducerEpoch: 1, BaseSequence: 1000}
	b := AppendBatch(nil, opts, recs)

	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if kb.FirstOffset != 77 || kb.Magic != 2 || kb.LastOffsetDelta != int32(len(recs)-1) || kb.NumRecords != int32(len(recs)) ||
		kb.FirstTimestamp != opts.Timestamp || kb.MaxTimestamp != opts.Timestamp || kb.Attributes != attrLogAppendTime ||
		kb.ProducerID != 99 || kb.ProducerEpoch != 1 || kb.FirstSequence != 1000 || int(kb.Length) != len(b)-12 {
		t.Fatalf("kmsg sees header %+v", kb)
	}
	if crc := int32(castagnoli32(b[21:])); kb.CRC != crc {
		t.Fatalf("CRC %#x, recomputed %#x", uint32(kb.CRC), uint32(crc))
	}
	rest := kb.Records
	for i, want := range recs {
		length, n := binary.Varint(rest)
		if n <= 0 || int(length) > len(rest)-n {
			t.Fatalf("record %d: bad length prefix", i)
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(rest[:n+int(length)]); err != nil {
			t.Fatalf("record %d: kmsg: %v", i, err)
		}
		rest = rest[n+int(length):]
		if kr.OffsetDelta != int32(i) || kr.TimestampDelta64 != 0 || kr.Attributes != 0 {
			t.Fatalf("record %d: offset delta %d, timestamp delta %d, attributes %d", i, kr.OffsetDelta, kr.TimestampDelta64, kr.Attributes)
		}
		got := Record{Key: kr.Key, Value: kr.Value}
		for _, h := range kr.Headers {
			got.Headers = append(got.Headers, Header{Key: h.Key, Value: h.Value})
		}
		if d := diffRecordContent([]Record{got}, []Record{want}); d != "" {
			t.Fatalf("record %d as kmsg reads it: %s", i, d)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the last record", len(rest))
	}
}

// TestDecodeKmsgBatches decodes batches that kmsg encoded, with CreateTime
// timestamps, producer state and the flags clients and brokers set.
func TestDecodeKmsgBatches(t *testing.T) {
	recs := append(sampleRecords(), manyRecords(4, 100, 200)...)
	deltas := make([]int64, len(recs))
	for i := range deltas {
		deltas[i] = int64(i*37) - 50 // producers can have out-of-order clocks
	}
	b := buildKmsg(t, kbatch{
		baseOffset: 500, leaderEpoch: 3, firstTS: 1_700_000_000_000, maxTS: 1_700_000_010_000,
		producerID: 8, epoch: 2, seq: 41, recs: toKmsg(recs, deltas),
	})
	got := mustDecode(t, b)
	if d := diffRecordContent(got, recs); d != "" {
		t.Fatal(d)
	}
	for i, r := range got {
		if r.Offset != 500+int64(i) || r.Timestamp != 1_700_000_000_000+deltas[i] {
			t.Fatalf("record %d: offset %d timestamp %d", i, r.Offset, r.Timestamp)
		}
	}
}

func TestLogAppendTimeIgnoresRecordDeltas(t *testing.T) {
	recs := valueRecords(3, 4)
	b := buildKmsg(t, kbatch{attrs: attrLogAppendTime, firstTS: 1000, maxTS: 5000, producerID: -1,
		recs: toKmsg(recs, []int64{0, 10, 20})})
	for i, r := range mustDecode(t, b) {
		if r.Timestamp != 5000 {
			t.Errorf("record %d timestamp %d, want the batch MaxTimestamp 5000", i, r.Timestamp)
		}
	}
}

func TestControlTransactionalBatch(t *testing.T) {
	// A COMMIT marker as a broker writes it: key = version 0, type 1; value =
	// version 0, coordinator epoch 5.
	key := []byte{0, 0, 0, 1}
	value := []byte{0, 0, 0, 0, 0, 5}
	b := buildKmsg(t, kbatch{attrs: attrTransactional | attrControl, baseOffset: 90, producerID: 31, epoch: 4,
		seq: -1, firstTS: 10, maxTS: 10, recs: []kmsg.Record{{Key: key, Value: value}}})
	h, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Control() || !h.Transactional() || h.ProducerID != 31 {
		t.Fatalf("flags: control %v transactional %v producer %d", h.Control(), h.Transactional(), h.ProducerID)
	}
	got := mustDecode(t, b)
	if len(got) != 1 || !bytes.Equal(got[0].Key, key) || !bytes.Equal(got[0].Value, value) || got[0].Offset != 90 {
		t.Fatalf("marker decoded as %+v", got)
	}
}

// compressedFixtures are the compressed batch shapes every decoder test
// covers: each codec, and each framing a producer may send.
var compressedFixtures = []struct {
	name string
	b    kbatch
}{
	{"gzip", kbatch{codec: CodecGzip}},
	{"snappy raw", kbatch{codec: CodecSnappy}},
	{"snappy xerial", kbatch{codec: CodecSnappy, xerial: true}},
	{"lz4 frame", kbatch{codec: CodecLZ4}},
	{"zstd with content size", kbatch{codec: CodecZstd}},
	{"zstd streamed", kbatch{codec: CodecZstd, zstdStream: true}},
}

func TestDecodeCompressed(t *testing.T) {
	recs := append(sampleRecords(), manyRecords(5, 300, 500)...) // > 32 KiB: several xerial chunks
	for _, tt := range compressedFixtures {
		t.Run(tt.name, func(t *testing.T) {
			kb := tt.b
			kb.baseOffset, kb.firstTS, kb.maxTS, kb.producerID = 1000, 50, 60, -1
			kb.recs = toKmsg(recs, nil)
			b := buildKmsg(t, kb)
			if tt.b.xerial && !bytes.HasPrefix(b[HeaderSize:], xerialMagic) {
				t.Fatal("fixture is not xerial framed")
			}
			if tt.b.codec == CodecZstd && zstdDeclaresSize(t, b) == tt.b.zstdStream {
				t.Fatalf("zstd fixture declares its content size: %v, want %v", tt.b.zstdStream, !tt.b.zstdStream)
			}
			got := mustDecode(t, b)
			if d := diffRecordContent(got, recs); d != "" {
				t.Fatal(d)
			}
			if got[0].Offset != 1000 || got[len(got)-1].Offset != 1000+int64(len(recs)-1) || got[0].Timestamp != 50 {
				t.Fatalf("offsets %d..%d, timestamp %d", got[0].Offset, got[len(got)-1].Offset, got[0].Timestamp)
			}
			if aliases(got[0].Value, b) {
				t.Error("value of a compressed batch points into the compressed bytes")
			}
		})
	}
}

func TestXerialChunkFraming(t *testing.T) {
	recs := manyRecords(6, 20, 50)
	var raw []byte
	for _, r := range toKmsg(recs, nil) {
		raw = append(raw, kmsgRecordBytes(r)...)
	}
	// Hand-framed with tiny chunks, as snappy-java does with its block size,
	// to exercise chunk boundaries that fall inside records.
	framed := append([]byte(nil), xerialMagic...)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	for p := 0; p < len(raw); p += 37 {
		chunk := compressWith(t, CodecSnappy, raw[p:min(p+37, len(raw))], false, false)
		framed = binary.BigEndian.AppendUint32(framed, uint32(len(chunk)))
		framed = append(framed, chunk...)
	}
	b := snappyBatch(recs, framed)
	if d := diffRecordContent(mustDecode(t, b), recs); d != "" {
		t.Fatal(d)
	}

	for _, bad := range []struct {
		name  string
		frame []byte
	}{
		{"header only, no chunks", framed[:16]},
		{"header cut short", framed[:12]},
		{"chunk length cut short", framed[:18]},
		{"chunk longer than the data", append(bytes.Clone(framed[:16]), 0, 0, 1, 0, 1, 2, 3)},
	} {
		if _, err := DecodeRecords(snappyBatch(recs, bad.frame), nil); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", bad.name, err)
		}
	}
}

// snappyBatch wraps already-compressed records in a snappy batch.
func snappyBatch(recs []Record, compressed []byte) []byte {
	b := rawBatch(compressed, int32(len(recs)))
	b[22] |= byte(CodecSnappy)
	fixCRC(b)
	return b
}

// TestDecompressionLimit sets the cap to exactly the decompressed size (must
// decode) and one byte less (must be ErrTooLarge), for every codec and
// framing, so the cap is an exact bound rather than a heuristic.
func TestDecompressionLimit(t *testing.T) {
	old := MaxDecompressedSize
	t.Cleanup(func() { MaxDecompressedSize = old })
	recs := valueRecords(4, 300_000) // ~1.2 MB of repetitive bytes: a small bomb
	var rawLen int
	for _, r := range toKmsg(recs, nil) {
		rawLen += len(kmsgRecordBytes(r))
	}
	for _, tt := range compressedFixtures {
		t.Run(tt.name, func(t *testing.T) {
			kb := tt.b
			kb.producerID = -1
			kb.recs = toKmsg(recs, nil)
			b := buildKmsg(t, kb)
			if len(b) > rawLen/15 { // snappy's best case is about 20:1
				t.Fatalf("fixture compresses to %d of %d bytes: not a bomb", len(b), rawLen)
			}
			if tt.b.codec == CodecZstd && zstdDeclaresSize(t, b) == tt.b.zstdStream {
				t.Fatalf("zstd fixture declares its content size: %v, want %v", tt.b.zstdStream, !tt.b.zstdStream)
			}
			MaxDecompressedSize = rawLen
			if _, err := DecodeRecords(b, nil); err != nil {
				t.Fatalf("limit = size: %v", err)
			}
			MaxDecompressedSize = rawLen - 1
			_, err := DecodeRecords(b, nil)
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("limit = size-1: %v, want ErrTooLarge", err)
			}
		})
	}
}

// TestDecompressorCauseIsKept checks that a decompressor's own error stays
// reachable under ErrCorrupt, for logs that want the library's reason.
func TestDecompressorCauseIsKept(t *testing.T) {
	b := buildKmsg(t, kbatch{codec: CodecGzip, producerID: -1, recs: toKmsg(valueRecords(3, 50), nil)})
	b[len(b)-8] ^= 0xff // gzip trailer CRC-32 of the uncompressed data
	fixCRC(b)
	_, err := DecodeRecords(b, nil)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, kgzip.ErrChecksum) {
		t.Fatalf("error %v, want ErrCorrupt wrapping gzip.ErrChecksum", err)
	}
}

// TestZstdWindowOverLimit documents a deliberate refusal: a zstd frame that
// declares no content size and a window larger than MaxDecompressedSize is
// ErrTooLarge even if its content would fit, because the decoder's memory
// bound is enforced through the window.
func TestZstdWindowOverLimit(t *testing.T) {
	old := MaxDecompressedSize
	t.Cleanup(func() { MaxDecompressedSize = old })
	var raw []byte
	recs := valueRecords(2, 200_000) // more than one block, so the size is not known up front
	for _, r := range toKmsg(recs, nil) {
		raw = append(raw, kmsgRecordBytes(r)...)
	}
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, raw)
	b := rawBatch(buf.Bytes(), int32(len(recs)))
	b[22] |= byte(CodecZstd)
	fixCRC(b)
	var zh zstd.Header
	if err := zh.Decode(buf.Bytes()); err != nil || zh.HasFCS || zh.WindowSize != 4<<20 {
		t.Fatalf("fixture header %+v (err %v): want a 4 MiB window and no content size", zh, err)
	}
	MaxDecompressedSize = 4 << 20
	if d := diffRecordContent(mustDecode(t, b), recs); d != "" {
		t.Fatal(d)
	}
	MaxDecompressedSize = 1 << 20
	if _, err := DecodeRecords(b, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("window 4 MiB, limit 1 MiB: %v, want ErrTooLarge", err)
	}
}

func TestDecodeRecordRules(t *testing.T) {
	// rec builds one record body by hand: fields are varints unless noted.
	rec := func(fields ...[]byte) []byte {
		var body []byte
		for _, f := range fields {
			body = append(body, f...)
		}
		return append(appendVarint(nil, int64(len(body))), body...)
	}
	v := func(x int64) []byte { return appendVarint(nil, x) }
	raw := func(b ...byte) []byte { return b }
	attrs := raw(0)
	good := func(i int64) []byte { return rec(attrs, v(0), v(i), v(1), raw('k'), v(1), raw('v'), v(0)) }
	long := func(i int64) []byte { return rec(attrs, v(0), v(i), v(-1), v(20), make([]byte, 20), v(0)) }

	tests := []struct {
		name    string
		records []byte
		n       int32
		record  int // index the error must name
	}{
		{"offset delta not the index", append(good(0), good(5)...), 2, 1},
		{"offset delta repeats", append(good(0), good(0)...), 2, 1},
		{"key length below -1", rec(attrs, v(0), v(0), v(-2), v(-1), v(0)), 1, 0},
		{"key longer than the record", rec(attrs, v(0), v(0), v(50), raw('k'), v(-1), v(0)), 1, 0},
		{"value longer than the record", rec(attrs, v(0), v(0), v(-1), v(9), raw('v'), v(0)), 1, 0},
		{"negative header count", rec(attrs, v(0), v(0), v(-1), v(-1), v(-1)), 1, 0},
		{"header count beyond the record", rec(attrs, v(0), v(0), v(-1), v(-1), v(1000), v(0), v(0)), 1, 0},
		{"null header key", rec(attrs, v(0), v(0), v(-1), v(-1), v(1), v(-1), v(-1)), 1, 0},
		{"header value below -1", rec(attrs, v(0), v(0), v(-1), v(-1), v(1), v(0), v(-3)), 1, 0},
		{"fields shorter than the length", append(appendVarint(nil, 9), attrs[0], 0, 0, 1, 1, 0, 0, 0, 0), 1, 0},
		{"record length beyond the batch", append(appendVarint(nil, 100), attrs[0], 0, 0, 1, 1, 0, 0), 1, 0},
		{"record length too small", append(appendVarint(nil, 2), 0, 0, 0, 0, 0, 0, 0), 1, 0},
		{"six-byte varint for a 32-bit field", rec(attrs, v(0), raw(0x80, 0x80, 0x80, 0x80, 0x80, 0), v(-1), v(-1), v(0)), 1, 0},
		{"32-bit varint overflowing", rec(attrs, v(0), raw(0xff, 0xff, 0xff, 0xff, 0x1f), v(-1), v(-1), v(0)), 1, 0},
		{"64-bit varint overflowing", rec(attrs, raw(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), v(0), v(-1), v(-1), v(0)), 1, 0},
		{"varint running off the record", rec(attrs, v(0), v(0), v(-1), v(-1), raw(0x80)), 1, 0},
		{"fewer records than the header says", append(long(0), long(1)...), 3, 2},
		{"bytes after the last record", append(good(0), 0, 0, 0, 0, 0, 0, 0), 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := rawBatch(tt.records, tt.n)
			dst := []Record{{Value: []byte("kept")}}
			out, err := DecodeRecords(b, dst)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v, want ErrCorrupt", err)
			}
			if e.Record != tt.record {
				t.Errorf("error names record %d, want %d: %v", e.Record, tt.record, err)
			}
			if e.Offset < HeaderSize || e.Offset > len(b) {
				t.Errorf("error offset %d outside the records region [%d, %d]", e.Offset, HeaderSize, len(b))
			}
			if len(out) != 1 || string(out[0].Value) != "kept" {
				t.Errorf("dst not returned unchanged on error: %d records", len(out))
			}
		})
	}

	t.Run("valid hand-built records decode", func(t *testing.T) {
		b := rawBatch(append(good(0), good(1)...), 2)
		got := mustDecode(t, b)
		if len(got) != 2 || string(got[1].Key) != "k" || string(got[1].Value) != "v" {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("corrupt compressed records name decompressed bytes", func(t *testing.T) {
		b := buildKmsg(t, kbatch{codec: CodecGzip, producerID: -1, recs: toKmsg(valueRecords(2, 3), nil)})
		binary.BigEndian.PutUint32(b[57:], 3) // claims one record more than it holds
		binary.BigEndian.PutUint32(b[23:], 2)
		fixCRC(b)
		_, err := DecodeRecords(b, nil)
		var e *Error
		if !errors.As(err, &e) || !e.Decompressed || !strings.Contains(err.Error(), "decompressed byte") {
			t.Fatalf("error %v, want one located in decompressed bytes", err)
		}
	})
}

func TestDecodeAppendsToDst(t *testing.T) {
	first := AppendBatch(nil, BatchOptions{BaseOffset: 0, ProducerID: -1}, valueRecords(2, 5))
	second := AppendBatch(nil, BatchOptions{BaseOffset: 2, ProducerID: -1}, sampleRecords())
	recs := mustDecode(t, first)
	recs, err := DecodeRecords(second, recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2+len(sampleRecords()) {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	// Reusing the slice for a batch without headers must not leave the
	// previous batch's headers behind.
	reused, err := DecodeRecords(first, recs[:0])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reused {
		if r.Headers != nil {
			t.Fatalf("record %d kept stale headers %v", i, r.Headers)
		}
	}
}

// TestAliasingContract pins down what DecodeRecords shares with its input:
// values alias an uncompressed batch, header keys never do, and appending to
// a decoded slice cannot overwrite the next field.
func TestAliasingContract(t *testing.T) {
	b := AppendBatch(nil, BatchOptions{ProducerID: -1}, []Record{
		{Key: []byte("key"), Value: []byte("value"), Headers: []Header{{Key: "hk", Value: []byte("hv")}}},
	})
	got := mustDecode(t, b)
	r := got[0]
	if !aliases(r.Value, b) || !aliases(r.Key, b) || !aliases(r.Headers[0].Value, b) {
		t.Fatal("key, value and header value of an uncompressed batch should point into it")
	}
	_ = append(r.Key, "XXXXXXX"...)
	if string(r.Value) != "value" {
		t.Fatalf("appending to the key overwrote the value: %q", r.Value)
	}
	for i := range b {
		b[i] = 0 // the caller reuses its read buffer
	}
	if r.Headers[0].Key != "hk" {
		t.Fatalf("header key changed with the batch buffer: %q", r.Headers[0].Key)
	}
}

func aliases(s, buf []byte) bool {
	if len(s) == 0 || len(buf) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= start && p < start+uintptr(len(buf))
}

func TestAllocations(t *testing.T) {
	recs := valueRecords(100, 100)
	opts := BatchOptions{ProducerID: -1}
	buf := AppendBatch(nil, opts, recs)
	if n := testing.AllocsPerRun(50, func() { buf = AppendBatch(buf[:0], opts, recs) }); n != 0 {
		t.Errorf("AppendBatch into a reused buffer: %.1f allocs, want 0", n)
	}
	dst := mustDecode(t, buf)
	if n := testing.AllocsPerRun(50, func() { dst, _ = DecodeRecords(buf, dst[:0]) }); n != 0 {
		t.Errorf("DecodeRecords of an uncompressed batch into a reused slice: %.1f allocs, want 0", n)
	}
	withHeaders := AppendBatch(nil, opts, manyRecords(9, 100, 100))
	dst = mustDecode(t, withHeaders)
	if n := testing.AllocsPerRun(50, func() { dst, _ = DecodeRecords(withHeaders, dst[:0]) }); n > 4 {
		t.Errorf("DecodeRecords with headers: %.1f allocs per batch, want a few, not one per record", n)
	}
}

// castagnoli32 is the CRC the spec names, computed without this package's table.
func castagnoli32(b []byte) uint32 {
	// Bitwise CRC-32C, reflected polynomial 0x82F63B78: slow and obviously
	// right, an oracle for the table-driven hardware path.
	crc := uint32(math.MaxUint32)
	for _, c := range b {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82F63B78
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}
