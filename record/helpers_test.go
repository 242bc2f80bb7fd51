package record

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The helpers here build batches with an independent encoder, kmsg plus the
// compression libraries, so the decoder is not only tested against its own
// encoder.

// kbatch describes a batch to build through kmsg.
type kbatch struct {
	codec       Codec
	xerial      bool  // snappy only: wrap in xerial framing
	zstdStream  bool  // zstd only: streaming encoder (frame without content size)
	attrs       int16 // attribute bits besides the codec
	baseOffset  int64
	leaderEpoch int32
	firstTS     int64
	maxTS       int64
	producerID  int64
	epoch       int16
	seq         int32
	recs        []kmsg.Record
}

// kmsgRecordBytes encodes one record with kmsg, filling in the length prefix
// that kmsg leaves to the caller.
func kmsgRecordBytes(r kmsg.Record) []byte {
	r.Length = 0
	body := len(r.AppendTo(nil)) - 1 // varint(0) is one byte
	r.Length = int32(body)
	return r.AppendTo(nil)
}

// buildKmsg encodes b with kmsg.RecordBatch, compressing the records with the
// codec's reference library and computing the CRC.
func buildKmsg(t testing.TB, b kbatch) []byte {
	t.Helper()
	var raw []byte
	for _, r := range b.recs {
		raw = append(raw, kmsgRecordBytes(r)...)
	}
	records := compressWith(t, b.codec, raw, b.xerial, b.zstdStream)
	rb := kmsg.RecordBatch{
		FirstOffset:          b.baseOffset,
		Length:               int32(HeaderSize - 12 + len(records)),
		PartitionLeaderEpoch: b.leaderEpoch,
		Magic:                2,
		Attributes:           b.attrs | int16(b.codec),
		LastOffsetDelta:      int32(len(b.recs) - 1),
		FirstTimestamp:       b.firstTS,
		MaxTimestamp:         b.maxTS,
		ProducerID:           b.producerID,
		ProducerEpoch:        b.epoch,
		FirstSequence:        b.seq,
		NumRecords:           int32(len(b.recs)),
		Records:              records,
	}
	out := rb.AppendTo(nil)
	fixCRC(out)
	return out
}

// fixCRC recomputes the CRC of a batch whose CRC'd bytes were edited.
func fixCRC(batch []byte) {
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
}

// fixLength sets batchLength to match len(batch) and recomputes the CRC.
func fixLength(batch []byte) {
	binary.BigEndian.PutUint32(batch[8:], uint32(len(batch)-12))
	fixCRC(batch)
}

func compressWith(t testing.TB, c Codec, raw []byte, xerialFraming, zstdStream bool) []byte {
	t.Helper()
	switch c {
	case CodecNone:
		return raw
	case CodecGzip:
		return compressStream(t, raw, func(w io.Writer) writeCloser { return gzip.NewWriter(w) })
	case CodecSnappy:
		if xerialFraming {
			return xerial.Encode(nil, raw)
		}
		return s2.EncodeSnappy(nil, raw)
	case CodecLZ4:
		return compressStream(t, raw, func(w io.Writer) writeCloser { return lz4.NewWriter(w) })
	case CodecZstd:
		if zstdStream {
			var buf bytes.Buffer
			// Streaming frames declare their window instead of their size;
			// keep it small enough for the limit tests' 1 MB caps.
			w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
			if err != nil {
				t.Fatal(err)
			}
			// Flushing before the end commits the frame header before the
			// size is known, as a producer's output stream does.
			half := len(raw) / 2
			if _, err := w.Write(raw[:half]); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, w, raw[half:])
			return buf.Bytes()
		}
		// A single-segment frame declares its content size, as librdkafka's
		// one-shot compression does.
		w, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(true))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		return w.EncodeAll(raw, nil)
	}
	t.Fatalf("no compressor for %v", c)
	return nil
}

type writeCloser interface {
	Write([]byte) (int, error)
	Close() error
}

// compressStream writes raw through the compressing writer newWriter
// makes and returns what it wrote.
func compressStream(t testing.TB, raw []byte, newWriter func(io.Writer) writeCloser) []byte {
	t.Helper()
	var buf bytes.Buffer
	mustWrite(t, newWriter(&buf), raw)
	return buf.Bytes()
}

func mustWrite(t testing.TB, w writeCloser, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// toKmsg converts records to kmsg records with offset delta i and the given
// timestamp deltas (nil = all zero).
func toKmsg(recs []Record, tsDeltas []int64) []kmsg.Record {
	out := make([]kmsg.Record, len(recs))
	for i, r := range recs {
		kr := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		if tsDeltas != nil {
			kr.TimestampDelta64 = tsDeltas[i]
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		out[i] = kr
	}
	return out
}

// sampleRecords covers the field shapes that matter: null and empty keys and
// values, headers with null and empty values, repeated header keys.
func sampleRecords() []Record {
	return []Record{
		{Key: []byte("k0"), Value: []byte("v0")},
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("null value"), Value: nil},
		{Key: nil, Value: nil},
		{Key: []byte("h"), Value: []byte("with headers"), Headers: []Header{
			{Key: "content-type", Value: []byte("text/plain")},
			{Key: "null", Value: nil},
			{Key: "empty", Value: []byte{}},
			{Key: "content-type", Value: []byte("repeated key")},
			{Key: "", Value: []byte("empty key")},
		}},
		{Key: []byte("after"), Value: []byte("headers")},
	}
}

// manyRecords returns n records with pseudo-random bodies of up to maxLen bytes.
func manyRecords(seed uint64, n, maxLen int) []Record {
	rng := rand.New(rand.NewPCG(seed, seed))
	recs := make([]Record, n)
	for i := range recs {
		if rng.IntN(4) != 0 {
			recs[i].Key = []byte(fmt.Sprintf("key-%d", rng.IntN(1000)))
		}
		v := make([]byte, rng.IntN(maxLen+1))
		for j := range v {
			v[j] = byte('a' + rng.IntN(8)) // compressible, like real payloads
		}
		recs[i].Value = v
		for range rng.IntN(3) {
			recs[i].Headers = append(recs[i].Headers, Header{Key: fmt.Sprintf("h%d", rng.IntN(5)), Value: []byte("x")})
		}
	}
	return recs
}

func valueRecords(n, size int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		recs[i] = Record{Value: v}
	}
	return recs
}

// sameBytes is bytes.Equal that also tells null from empty.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// diffRecordContent reports the first difference in key, value or headers,
// the part of a record that survives any re-encoding.
func diffRecordContent(got, want []Record) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !sameBytes(g.Key, w.Key) {
			return fmt.Sprintf("record %d: key %q (nil %v), want %q (nil %v)", i, g.Key, g.Key == nil, w.Key, w.Key == nil)
		}
		if !sameBytes(g.Value, w.Value) {
			return fmt.Sprintf("record %d: value %.40q (nil %v), want %.40q (nil %v)", i, g.Value, g.Value == nil, w.Value, w.Value == nil)
		}
		if len(g.Headers) != len(w.Headers) {
			return fmt.Sprintf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for j := range g.Headers {
			gh, wh := g.Headers[j], w.Headers[j]
			if gh.Key != wh.Key || !sameBytes(gh.Value, wh.Value) {
				return fmt.Sprintf("record %d header %d: %q=%q (nil %v), want %q=%q (nil %v)",
					i, j, gh.Key, gh.Value, gh.Value == nil, wh.Key, wh.Value, wh.Value == nil)
			}
		}
	}
	return ""
}

// mustDecode decodes a batch that must be valid.
func mustDecode(t testing.TB, batch []byte) []Record {
	t.Helper()
	recs, err := DecodeRecords(batch, nil)
	if err != nil {
		t.Fatalf("DecodeRecords: %v", err)
	}
	return recs
}

// rawBatch wraps hand-built record bytes in an uncompressed batch with a
// correct length and CRC, so decoding reaches the record parser.
func rawBatch(records []byte, numRecords int32) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(records))
	b[16] = 2
	binary.BigEndian.PutUint32(b[23:], uint32(numRecords-1))
	binary.BigEndian.PutUint64(b[43:], ^uint64(0)) // producer id -1
	binary.BigEndian.PutUint32(b[57:], uint32(numRecords))
	b = append(b, records...)
	fixLength(b)
	return b
}

// appendVarint is the test's own zigzag varint writer for hand-built records.
func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// zstdDeclaresSize reports whether the zstd frame starting a batch's records
// carries a content size, the property that picks the decoder's sizing path.
func zstdDeclaresSize(t testing.TB, batch []byte) bool {
	t.Helper()
	var zh zstd.Header
	if err := zh.Decode(batch[HeaderSize:]); err != nil {
		t.Fatalf("zstd frame header: %v", err)
	}
	return zh.HasFCS
}
