package codec

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The shared test vectors of the Pico record codec. Every client that
// implements the codec (the Rust crate picomq-protocol reads the same file in
// client/rust/picomq-protocol/tests/vectors.rs) checks that it encodes the
// valid cases to exactly these bytes, decodes them back, and rejects the
// invalid ones at the same byte. `cd sdk && go test ./wire/codec -run Vectors
// -update-vectors` regenerates the file from vectorCases; review the diff:
// any change to existing bytes breaks every deployed client.

const vectorsFile = "../testdata/codec-vectors.json"

var updateVectors = flag.Bool("update-vectors", false, "rewrite "+vectorsFile)

// Bytes fields are hex, or null for a null key/value; header keys are hex
// too because the format does not require UTF-8.
type vectorHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

type vectorRecord struct {
	Offset    int64          `json:"offset"`
	Timestamp int64          `json:"timestamp"`
	Key       *string        `json:"key"`
	Value     *string        `json:"value"`
	Headers   []vectorHeader `json:"headers"`
}

type validVector struct {
	Name    string         `json:"name"`
	Records []vectorRecord `json:"records"`
	Frame   string         `json:"frame"`
}

type invalidVector struct {
	Name    string `json:"name"`
	Frame   string `json:"frame"`
	ErrorAt int    `json:"errorAt"` // the byte the decoder names
}

type vectors struct {
	Comment string          `json:"comment"`
	Valid   []validVector   `json:"valid"`
	Invalid []invalidVector `json:"invalid"`
}

func hexPtr(b []byte) *string {
	if b == nil {
		return nil
	}
	s := hex.EncodeToString(b)
	return &s
}

func toVector(recs []Record) []vectorRecord {
	out := make([]vectorRecord, len(recs))
	for i, r := range recs {
		out[i] = vectorRecord{Offset: r.Offset, Timestamp: r.Timestamp, Key: hexPtr(r.Key), Value: hexPtr(r.Value), Headers: []vectorHeader{}}
		for _, h := range r.Headers {
			out[i].Headers = append(out[i].Headers, vectorHeader{Key: hex.EncodeToString([]byte(h.Key)), Value: hexPtr(h.Value)})
		}
	}
	return out
}

func fromHex(t *testing.T, s *string) []byte {
	t.Helper()
	if s == nil {
		return nil
	}
	b, err := hex.DecodeString(*s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fromVector(t *testing.T, in []vectorRecord) []Record {
	out := make([]Record, len(in))
	for i, r := range in {
		out[i] = Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: fromHex(t, r.Key), Value: fromHex(t, r.Value)}
		for _, h := range r.Headers {
			out[i].Headers = append(out[i].Headers, Header{Key: string(fromHex(t, &h.Key)), Value: fromHex(t, h.Value)})
		}
	}
	return out
}

// vectorCases are the valid frames: nulls and empties apart, binary bytes,
// repeated and null-valued headers, extreme integers, a non-UTF-8 header key.
func vectorCases() []struct {
	name string
	recs []Record
} {
	return []struct {
		name string
		recs []Record
	}{
		{"empty frame", []Record{}},
		{"one value", []Record{{Value: []byte(`{"item":"widget"}`)}}},
		{"null key and value", []Record{{Offset: 8, Timestamp: -1}}},
		{"empty key and value", []Record{{Key: []byte{}, Value: []byte{}}}},
		{"read page", []Record{
			{Offset: 7, Timestamp: 1764406800123, Key: []byte("k"), Value: []byte("v"),
				Headers: []Header{{Key: "trace", Value: []byte("abc")}, {Key: "null"}, {Key: "", Value: []byte{}}, {Key: "trace", Value: []byte("again")}}},
			{Offset: 8, Timestamp: 1764406800124, Value: bytes.Repeat([]byte{0xff, 0x00}, 10)},
		}},
		{"extreme integers", []Record{{Offset: 1<<63 - 1, Timestamp: -1 << 63, Value: []byte{0}}}},
		{"binary header key", []Record{{Value: []byte("x"), Headers: []Header{{Key: "\xff\xfe", Value: []byte{0x80}}}}}},
	}
}

// invalidCases derive broken frames from valid ones.
func invalidCases() []struct {
	name  string
	frame []byte
} {
	one := Encode([]Record{{Value: []byte("abc"), Headers: []Header{{Key: "h", Value: []byte("v")}}}})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(one)) }
	return []struct {
		name  string
		frame []byte
	}{
		{"short frame", []byte("PQB")},
		{"bad magic", mut(func(b []byte) []byte { b[3] = '2'; return b })},
		{"count too high", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 2); return b })},
		{"huge count", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 1<<31); return b })},
		{"trailing bytes", append(bytes.Clone(one), 0)},
		{"record length past end", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 1000); return b })},
		{"record length below minimum", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 3); return b })},
		{"value length past record", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[32:], 100); return b })},
		{"negative value length", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[32:], 0xfffffffe); return b })},
		{"header count too high", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[39:], 5); return b })},
		{"header key past record", mut(func(b []byte) []byte { binary.BigEndian.PutUint32(b[43:], 50); return b })},
		{"truncated record", one[:len(one)-1]},
	}
}

func TestVectors(t *testing.T) {
	if *updateVectors {
		v := vectors{Comment: "Pico record codec test vectors, checked by sdk/wire/codec (Go) and client/rust/picomq-protocol (Rust); generated by cd sdk && go test ./wire/codec -run Vectors -update-vectors"}
		for _, c := range vectorCases() {
			v.Valid = append(v.Valid, validVector{Name: c.name, Records: toVector(c.recs), Frame: hex.EncodeToString(Encode(c.recs))})
		}
		for _, c := range invalidCases() {
			_, err := Decode(c.frame, nil, Limits{})
			at, perr := errorByte(err)
			if perr != nil {
				t.Fatalf("%s: %v", c.name, perr)
			}
			v.Invalid = append(v.Invalid, invalidVector{Name: c.name, Frame: hex.EncodeToString(c.frame), ErrorAt: at})
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(vectorsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Valid) == 0 || len(v.Invalid) == 0 {
		t.Fatal("no vectors")
	}
	for _, c := range v.Valid {
		recs := fromVector(t, c.Records)
		if got := hex.EncodeToString(Encode(recs)); got != c.Frame {
			t.Errorf("%s: Encode = %s, vector %s", c.Name, got, c.Frame)
		}
		out, err := Decode(fromHex(t, &c.Frame), nil, Limits{})
		if err != nil {
			t.Errorf("%s: Decode: %v", c.Name, err)
			continue
		}
		if got := toVector(out); !reflect.DeepEqual(got, c.Records) {
			t.Errorf("%s: Decode = %+v, vector %+v", c.Name, got, c.Records)
		}
	}
	for _, c := range v.Invalid {
		_, err := Decode(fromHex(t, &c.Frame), nil, Limits{})
		at, perr := errorByte(err)
		if perr != nil || at != c.ErrorAt {
			t.Errorf("%s: Decode error %v (byte %d, %v), vector says byte %d", c.Name, err, at, perr, c.ErrorAt)
		}
	}
}

// errorByte extracts the byte position a decoding error names.
func errorByte(err error) (int, error) {
	if !errors.Is(err, ErrInvalid) {
		return 0, fmt.Errorf("want an ErrInvalid, got %v", err)
	}
	var at int
	rest := strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
	if _, serr := fmt.Sscanf(rest, "byte %d:", &at); serr != nil {
		return 0, fmt.Errorf("no byte position in %q", err)
	}
	return at, nil
}
