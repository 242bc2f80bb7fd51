package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func sample() []Record {
	return []Record{
		{Offset: 7, Timestamp: 1764406800123, Key: []byte("k"), Value: []byte("v"),
			Headers: []Header{{Key: "trace", Value: []byte("abc")}, {Key: "null", Value: nil}, {Key: "", Value: []byte{}}}},
		{Offset: 8, Timestamp: -1},                          // null key, null value
		{Key: []byte{}, Value: []byte{}},                    // empty, not null
		{Value: bytes.Repeat([]byte{0xff, 0x00}, 10)},       // binary
		{Value: []byte("x"), Headers: []Header{{Key: "a"}}}, // null header value
	}
}

// TestRoundTrip: Decode(Encode(x)) == x, nulls and empties kept apart.
func TestRoundTrip(t *testing.T) {
	in := sample()
	b := Encode(in)
	out, err := Decode(b, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	if out[1].Key != nil || out[1].Value != nil || out[2].Key == nil || out[2].Value == nil {
		t.Fatal("null and empty must stay distinct")
	}
	if got, want := len(b), FrameHeaderSize+Size(&in[0])+Size(&in[1])+Size(&in[2])+Size(&in[3])+Size(&in[4]); got != want {
		t.Fatalf("encoded %d bytes, Size says %d", got, want)
	}
}

// TestDecodeAliasesInput: values are views of the input (no copy), with
// capacity capped so appending to one cannot clobber the frame.
func TestDecodeAliasesInput(t *testing.T) {
	b := Encode([]Record{{Value: []byte("abc")}, {Value: []byte("def")}})
	out, err := Decode(b, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if cap(out[0].Value) != 3 {
		t.Fatalf("value capacity %d, want 3", cap(out[0].Value))
	}
	_ = append(out[0].Value, 'X')
	if string(out[1].Value) != "def" {
		t.Fatal("append to a decoded value overwrote the frame")
	}
}

// TestDecodeDocumentedBytes pins the documented layout byte by byte, so a
// change to the encoder that breaks other-language clients fails here.
func TestDecodeDocumentedBytes(t *testing.T) {
	want := []byte{
		'P', 'Q', 'B', '1', 0, 0, 0, 1, // magic, count 1
		0, 0, 0, 40, // record length
		0, 0, 0, 0, 0, 0, 0, 5, // offset 5
		0, 0, 0, 0, 0, 0, 0, 9, // timestamp 9
		0, 0, 0, 1, 'k', // key "k"
		0xff, 0xff, 0xff, 0xff, // null value
		0, 0, 0, 1, // one header
		0, 0, 0, 1, 'h', 0, 0, 0, 2, 'h', 'v', // h: "hv"
	}
	got := Encode([]Record{{Offset: 5, Timestamp: 9, Key: []byte("k"), Headers: []Header{{Key: "h", Value: []byte("hv")}}}})
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%v\nwant\n%v", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Encode([]Record{{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "h", Value: []byte("x")}}}})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string][]byte{
		"empty":                  {},
		"short header":           []byte("PQB1"),
		"bad magic":              mut(func(b []byte) []byte { b[3] = '2'; return b }),
		"count too high":         mut(func(b []byte) []byte { b[7] = 2; return b }),
		"count huge":             mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 1<<31); return b }),
		"trailing byte":          append(bytes.Clone(good), 0),
		"truncated":              good[:len(good)-1],
		"length long":            mut(func(b []byte) []byte { b[11]++; return b }),
		"length short":           mut(func(b []byte) []byte { b[11]--; return b }),
		"key len -2":             mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[28:], 0xfffffffe); return b }),
		"key len past":           mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[28:], 100); return b }),
		"headers huge":           mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[42:], 1<<30); return b }),
		"zero records but bytes": append(AppendFrameHeader(nil, 0), 1, 2, 3),
	}
	for name, b := range cases {
		if _, err := Decode(b, nil, Limits{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	if out, err := Decode(AppendFrameHeader(nil, 0), nil, Limits{}); err != nil || len(out) != 0 {
		t.Errorf("empty frame: %v %v", out, err)
	}
}

func TestDecodeLimits(t *testing.T) {
	b := Encode([]Record{{}, {Headers: []Header{{Key: "a"}, {Key: "b"}}}})
	if _, err := Decode(b, nil, Limits{MaxRecords: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MaxRecords: %v", err)
	}
	if _, err := Decode(b, nil, Limits{MaxHeaders: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MaxHeaders: %v", err)
	}
	if _, err := Decode(b, nil, Limits{MaxRecords: 2, MaxHeaders: 2}); err != nil {
		t.Errorf("at the limits: %v", err)
	}
}

// valuesFrame encodes n header-less records with size-byte values.
func valuesFrame(n, size int) []byte {
	recs := make([]Record, n)
	for i := range recs {
		recs[i].Value = make([]byte, size)
	}
	return Encode(recs)
}

func TestDecodeAllocations(t *testing.T) {
	b := valuesFrame(100, 100)
	dst := make([]Record, 0, 100)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if dst, err = Decode(b, dst, Limits{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Decode of 100 header-less records allocated %v times, want 0", allocs)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(sample()))
	f.Add(AppendFrameHeader(nil, 0))
	f.Add([]byte("PQB1\x00\x00\x00\x01\x00\x00\x00\x1c"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := Decode(b, nil, Limits{MaxRecords: 1 << 16, MaxHeaders: 1 << 10})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		// Whatever decodes re-encodes to the same bytes: the format has
		// exactly one encoding of each frame.
		if again := Encode(out); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	frame := valuesFrame(100, 1024)
	dst := make([]Record, 0, 100)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = Decode(frame, dst, Limits{})
	}
}
