package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// appendBatch encodes recs as one uncompressed CreateTime batch at base
// (timestamps as deltas from the first): the layout of Kafka's spec,
// written out independently of the server's encoder so each checks the
// other (api/pico's TestReadBatchesFormat decodes the server's batches
// with Decode).
func appendBatch(dst []byte, base int64, attrs uint16, recs []codec.Record) []byte {
	var body []byte
	first := recs[0].Timestamp
	for i, r := range recs {
		var rb []byte
		rb = append(rb, 0)
		rb = binary.AppendVarint(rb, r.Timestamp-first)
		rb = binary.AppendVarint(rb, int64(i))
		rb = appendField(rb, r.Key)
		rb = appendField(rb, r.Value)
		rb = binary.AppendVarint(rb, int64(len(r.Headers)))
		for _, h := range r.Headers {
			rb = appendField(rb, []byte(h.Key))
			rb = appendField(rb, h.Value)
		}
		body = binary.AppendVarint(body, int64(len(rb)))
		body = append(body, rb...)
	}
	h := make([]byte, HeaderSize)
	binary.BigEndian.PutUint64(h, uint64(base))
	binary.BigEndian.PutUint32(h[offLength:], uint32(HeaderSize-12+len(body)))
	h[offMagic] = 2
	binary.BigEndian.PutUint16(h[offAttributes:], attrs)
	binary.BigEndian.PutUint32(h[offLastDelta:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(h[offFirstTS:], uint64(first))
	binary.BigEndian.PutUint64(h[offMaxTS:], uint64(recs[len(recs)-1].Timestamp))
	binary.BigEndian.PutUint64(h[43:], ^uint64(0)) // producer id -1
	binary.BigEndian.PutUint16(h[51:], 0xffff)     // producer epoch -1
	binary.BigEndian.PutUint32(h[53:], ^uint32(0)) // base sequence -1
	binary.BigEndian.PutUint32(h[offNumRecords:], uint32(len(recs)))
	b := append(h, body...)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return append(dst, b...)
}

func appendField(b, f []byte) []byte {
	if f == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(f))), f...)
}

func sampleRecords() []codec.Record {
	return []codec.Record{
		{Offset: 10, Timestamp: 1000, Key: []byte("k"), Value: []byte("v0")},
		{Offset: 11, Timestamp: 998, Value: []byte{}, Headers: []codec.Header{{Key: "h", Value: []byte("hv")}, {Key: "n"}}},
		{Offset: 12, Timestamp: 1005, Key: []byte{}, Value: nil},
	}
}

// TestDecode: records come back with their offsets, timestamps (negative
// deltas too), null and empty keys and values kept apart, headers; the
// records of the first batch below from are skipped.
func TestDecode(t *testing.T) {
	recs := sampleRecords()
	page := appendBatch(nil, 10, 0, recs)
	page = appendBatch(page, 13, 0, []codec.Record{{Offset: 13, Timestamp: 2000, Value: []byte("x")}})
	got, err := Decode(page, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]codec.Record(nil), recs...), codec.Record{Offset: 13, Timestamp: 2000, Value: []byte("x")})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	if got[1].Key != nil || got[1].Value == nil || got[2].Key == nil || got[2].Value != nil {
		t.Errorf("null and empty not kept apart: %+v", got)
	}
	got, err = Decode(page, 12, nil)
	if err != nil || len(got) != 2 || got[0].Offset != 12 || got[1].Offset != 13 {
		t.Fatalf("from 12: %+v %v", got, err)
	}
}

// TestDecodeLogAppendTime: every record of a LogAppendTime batch carries
// the batch's max timestamp.
func TestDecodeLogAppendTime(t *testing.T) {
	page := appendBatch(nil, 0, attrLogAppendTime, sampleRecords())
	got, err := Decode(page, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Timestamp != 1005 {
			t.Fatalf("timestamp %d, want the max timestamp 1005", r.Timestamp)
		}
	}
}

// TestDecodeRejects: each broken rule is an *Error naming where, and no
// records come back.
func TestDecodeRejects(t *testing.T) {
	good := appendBatch(nil, 0, 0, sampleRecords())
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	recrc := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
		return b
	}
	cases := map[string][]byte{
		"truncated header": good[:30],
		"truncated batch":  good[:len(good)-1],
		"bad magic":        mut(func(b []byte) []byte { b[offMagic] = 1; return b }),
		"bad crc":          mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
		"compressed":       mut(func(b []byte) []byte { b[offAttributes+1] |= 1; return recrc(b) }),
		"control":          mut(func(b []byte) []byte { b[offAttributes+1] |= attrControl; return recrc(b) }),
		"count mismatch":   mut(func(b []byte) []byte { b[offNumRecords+3] = 2; return recrc(b) }),
		"trailing bytes":   mut(func(b []byte) []byte { return append(b, 0, 0, 0) }),
	}
	for name, page := range cases {
		got, err := Decode(page, 0, nil)
		var e *Error
		if !errors.As(err, &e) || len(got) != 0 {
			t.Errorf("%s: %d records, err %v; want an *Error and none", name, len(got), err)
		}
	}
}

// FuzzDecode: hostile pages never panic, and what decodes keeps the
// page's promises: offsets ascending from from, bytes within the page.
func FuzzDecode(f *testing.F) {
	f.Add(appendBatch(nil, 10, 0, sampleRecords()), int64(0))
	f.Add(appendBatch(appendBatch(nil, 0, attrLogAppendTime, sampleRecords()[:1]), 1, 0, sampleRecords()), int64(1))
	f.Fuzz(func(t *testing.T, page []byte, from int64) {
		recs, err := Decode(page, from, nil)
		if err != nil {
			if len(recs) != 0 {
				t.Fatalf("error %v with %d records", err, len(recs))
			}
			return
		}
		size := 0
		for i, r := range recs {
			if r.Offset < from || (i > 0 && r.Offset <= recs[i-1].Offset) {
				t.Fatalf("record %d at offset %d (from %d, previous %+v)", i, r.Offset, from, recs[max(i-1, 0)])
			}
			size += len(r.Key) + len(r.Value)
		}
		if size > len(page) {
			t.Fatalf("%d bytes of keys and values from a %d-byte page", size, len(page))
		}
	})
}

// TestDecodeAllocs: decoding records without headers into a slice of
// their number allocates nothing (keys and values alias the page); the
// field readers once built their error label per field, two allocations
// per record on every page a client read.
func TestDecodeAllocs(t *testing.T) {
	recs := make([]codec.Record, 1000)
	for i := range recs {
		recs[i] = codec.Record{Offset: int64(i), Timestamp: 5, Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, 100)}
	}
	page := appendBatch(nil, 0, 0, recs)
	dst := make([]codec.Record, 0, len(recs))
	allocs := testing.AllocsPerRun(20, func() {
		out, err := Decode(page, 0, dst[:0])
		if err != nil || len(out) != len(recs) {
			t.Fatalf("decoded %d records: %v", len(out), err)
		}
	})
	if allocs != 0 {
		t.Errorf("decoding %d records: %.0f allocations, want 0", len(recs), allocs)
	}
}

// FuzzEach: Each passes exactly the records Decode returns, in order, and
// fails on exactly the pages Decode rejects (Decode is built on it; this
// keeps the two contracts, all-or-nothing and per record, one decoder).
func FuzzEach(f *testing.F) {
	f.Add(appendBatch(nil, 10, 0, sampleRecords()), int64(0))
	f.Add(appendBatch(appendBatch(nil, 0, attrLogAppendTime, sampleRecords()[:1]), 1, 0, sampleRecords()), int64(2))
	f.Add(appendBatch(nil, 3, 0, sampleRecords())[:HeaderSize+5], int64(0))
	f.Fuzz(func(t *testing.T, page []byte, from int64) {
		want, werr := Decode(page, from, nil)
		var got []codec.Record
		err := Each(page, from, func(r codec.Record) { got = append(got, r) })
		if (err == nil) != (werr == nil) {
			t.Fatalf("Each error %v, Decode error %v", err, werr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Each passed %d records, Decode returned %d, or they differ", len(got), len(want))
		}
	})
}

// TestEachAllocs: Each allocates nothing for records without headers.
func TestEachAllocs(t *testing.T) {
	recs := make([]codec.Record, 1000)
	for i := range recs {
		recs[i] = codec.Record{Offset: int64(i), Timestamp: 5, Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, 100)}
	}
	page := appendBatch(nil, 0, 0, recs)
	n := 0
	allocs := testing.AllocsPerRun(20, func() {
		n = 0
		if err := Each(page, 0, func(codec.Record) { n++ }); err != nil || n != len(recs) {
			t.Fatalf("passed %d records: %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Each over %d records: %.0f allocations, want 0", len(recs), allocs)
	}
}

// TestReaderBatchAtATime: a Reader checks a batch whole before it returns
// any of its records: a page whose second batch's CRC is broken gives the
// first batch's records, then an *Error at the second's CRC, and none of
// the second's; a page whose first batch is broken gives none.
func TestReaderBatchAtATime(t *testing.T) {
	first := appendBatch(nil, 0, 0, sampleRecords())
	second := appendBatch(nil, int64(len(sampleRecords())), 0, sampleRecords())
	second[len(second)-1] ^= 1 // a value byte: only the CRC can tell
	for _, c := range []struct {
		name string
		page []byte
		want int
		pos  int
	}{
		{"second batch broken", append(append([]byte(nil), first...), second...), len(sampleRecords()), len(first) + offCRC},
		{"first batch broken", append(append([]byte(nil), second...), first...), 0, offCRC},
	} {
		r := NewReader(c.page, 0)
		n := 0
		for {
			rec, ok := r.Next()
			if !ok {
				break
			}
			if rec.Offset != int64(n) {
				t.Fatalf("%s: record %d at offset %d", c.name, n, rec.Offset)
			}
			n++
		}
		var e *Error
		if n != c.want || !errors.As(r.Err(), &e) || e.Pos != c.pos {
			t.Errorf("%s: %d records, then %v; want %d and an *Error at byte %d", c.name, n, r.Err(), c.want, c.pos)
		}
		if _, ok := r.Next(); ok {
			t.Errorf("%s: a record after the error", c.name)
		}
	}
}

// FuzzReader: a Reader fails on exactly the pages Decode rejects, returns
// the records Decode returns on the others, and before an error returns
// records in offset order at from or beyond, within the page.
func FuzzReader(f *testing.F) {
	f.Add(appendBatch(nil, 10, 0, sampleRecords()), int64(0))
	f.Add(appendBatch(appendBatch(nil, 0, attrLogAppendTime, sampleRecords()[:1]), 1, 0, sampleRecords()), int64(2))
	f.Add(appendBatch(nil, 3, 0, sampleRecords())[:HeaderSize+5], int64(0))
	f.Fuzz(func(t *testing.T, page []byte, from int64) {
		want, werr := Decode(page, from, nil)
		r := NewReader(page, from)
		var got []codec.Record
		size := 0
		for {
			rec, ok := r.Next()
			if !ok {
				break
			}
			if rec.Offset < from || (len(got) > 0 && rec.Offset <= got[len(got)-1].Offset) {
				t.Fatalf("record at offset %d after %d records (from %d)", rec.Offset, len(got), from)
			}
			size += len(rec.Key) + len(rec.Value)
			got = append(got, rec)
		}
		if size > len(page) {
			t.Fatalf("%d bytes of keys and values from a %d-byte page", size, len(page))
		}
		if (r.Err() == nil) != (werr == nil) {
			t.Fatalf("Reader error %v, Decode error %v", r.Err(), werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("Reader returned %d records, Decode %d, or they differ", len(got), len(want))
		}
	})
}

// TestReaderAllocs: reading a page of records without headers through a
// Reader allocates nothing.
func TestReaderAllocs(t *testing.T) {
	recs := make([]codec.Record, 1000)
	for i := range recs {
		recs[i] = codec.Record{Offset: int64(i), Timestamp: 5, Value: bytes.Repeat([]byte{'v'}, 100)}
	}
	page := appendBatch(nil, 0, 0, recs)
	allocs := testing.AllocsPerRun(20, func() {
		r := NewReader(page, 0)
		n := 0
		for _, ok := r.Next(); ok; _, ok = r.Next() {
			n++
		}
		if r.Err() != nil || n != len(recs) {
			t.Fatalf("read %d records: %v", n, r.Err())
		}
	})
	if allocs != 0 {
		t.Errorf("a Reader over %d records: %.0f allocations, want 0", len(recs), allocs)
	}
}
