package record

import (
	"bytes"
	"testing"
)

// TestFilterBatch: a compacted batch keeps its base offset, its span (last
// offset delta), the kept records' offsets, keys, values and timestamps;
// a rewritten compressed batch is stored uncompressed; keeping all is a
// verbatim copy; keeping none leaves an empty batch of the same span.
func TestFilterBatch(t *testing.T) {
	recs := []Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")},
		{Key: []byte("a"), Value: nil}, {Key: []byte("c"), Value: []byte("3")}}
	for _, c := range []Codec{CodecNone, CodecGzip, CodecZstd} {
		t.Run(c.String(), func(t *testing.T) {
			in := buildKmsg(t, kbatch{codec: c, baseOffset: 100, firstTS: 1000, maxTS: 1030, producerID: 7, epoch: 2, seq: 5,
				recs: toKmsg(recs, []int64{0, 10, 20, 30})})
			hin, _ := ParseHeader(in)
			out, kept, err := FilterBatch(nil, in, func(r *Record) bool { return r.Offset == 101 || r.Offset == 102 })
			if err != nil || kept != 2 {
				t.Fatalf("kept %d, err %v", kept, err)
			}
			h, err := Validate(out)
			if err != nil {
				t.Fatal(err)
			}
			if h.BaseOffset != 100 || h.LastOffsetDelta != 3 || h.NumRecords != 2 || h.Codec() != CodecNone ||
				h.ProducerID != 7 || h.ProducerEpoch != 2 || h.BaseSequence != 5 || h.FirstTimestamp != 1000 || h.MaxTimestamp != 1030 || h.Dense() {
				t.Fatalf("filtered header %+v (input %+v)", h, hin)
			}
			got, err := DecodeRecords(out, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Offset != 101 || string(got[0].Key) != "b" || got[0].Timestamp != 1010 ||
				got[1].Offset != 102 || got[1].Value != nil || got[1].Timestamp != 1020 {
				t.Fatalf("filtered records %+v", got)
			}
			all, kept, err := FilterBatch(nil, in, func(*Record) bool { return true })
			if err != nil || kept != 4 || !bytes.Equal(all, in) {
				t.Fatalf("keep all: kept %d, same bytes %v, err %v", kept, bytes.Equal(all, in), err)
			}
			none, kept, err := FilterBatch(nil, in, func(*Record) bool { return false })
			if err != nil || kept != 0 {
				t.Fatalf("keep none: kept %d, err %v", kept, err)
			}
			if h, err := Validate(none); err != nil || h.NumRecords != 0 || h.LastOffset() != 103 {
				t.Fatalf("empty batch %+v %v", h, err)
			}
		})
	}
}

// TestDecodeRejectsOffsetsOutsideSpan: in a batch with gaps, offset
// deltas must still ascend and stay within the span.
func TestDecodeRejectsOffsetsOutsideSpan(t *testing.T) {
	build := func(deltas ...int32) []byte {
		var recs []Record
		for range deltas {
			recs = append(recs, Record{Key: []byte("k"), Value: []byte("v")})
		}
		kr := toKmsg(recs, nil)
		for i := range kr {
			kr[i].OffsetDelta = deltas[i]
		}
		b := buildKmsg(t, kbatch{baseOffset: 10, producerID: -1, epoch: -1, seq: -1, recs: kr})
		// buildKmsg sets lastOffsetDelta = count-1; widen the span to 5.
		b[offLastOffsetDelta+3] = 5
		fixLength(b)
		return b
	}
	if recs, err := DecodeRecords(build(1, 5), nil); err != nil || recs[0].Offset != 11 || recs[1].Offset != 15 {
		t.Fatalf("gaps within the span: %v %+v", err, recs)
	}
	for name, b := range map[string][]byte{"descending": build(3, 2), "repeated": build(2, 2), "past the span": build(1, 6)} {
		if _, err := DecodeRecords(b, nil); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
