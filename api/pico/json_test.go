package pico

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestAppendJSONStringMatchesEncodingJSON: the hand-written encoder must
// produce a string that decodes to the same value encoding/json would.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `quo"te`, `back\slash`, "ctl\x00\x01\x1f", "tab\tnl\ncr\r", "héllo ✓", "\u2028\u2029", "<script>&"} {
		out := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q encoded as %s: invalid JSON: %v", s, out, err)
		}
		if back != s {
			t.Fatalf("%q round-tripped to %q", s, back)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("hello")
	f.Add("\xff\xfe invalid utf8")
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q encoded as %s: invalid JSON: %v", s, out, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q: got %q, encoding/json gives %q", s, back, wantBack)
		}
	})
}

// TestRecordsJSONBase64Fallback: binary values come back exactly via
// base64 with the encoding flag; text values stay text.
func TestRecordsJSONBase64Fallback(t *testing.T) {
	recs := []record.Record{
		{Offset: 7, Timestamp: 9, Key: []byte("k"), Value: []byte("text"), Headers: []record.Header{{Key: "h", Value: []byte{0xff}}}},
		{Offset: 8, Timestamp: 9, Value: []byte{0xff, 0x00, 0x80}},
		{Offset: 9, Timestamp: 9},
	}
	out := appendRecordsJSON(nil, recs, false, false)
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if got[0]["value"] != "text" || got[0]["key"] != "k" || got[0]["valueEncoding"] != nil {
		t.Fatalf("text record: %v", got[0])
	}
	hdr := got[0]["headers"].([]any)[0].(map[string]any)
	if hdr["valueEncoding"] != "base64" || hdr["value"] != base64.StdEncoding.EncodeToString([]byte{0xff}) {
		t.Fatalf("binary header: %v", hdr)
	}
	if got[1]["valueEncoding"] != "base64" || got[1]["value"] != base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0x80}) {
		t.Fatalf("binary record: %v", got[1])
	}
	if _, ok := got[1]["key"]; ok {
		t.Fatalf("null key rendered: %v", got[1])
	}
	if v, ok := got[2]["value"]; !ok || v != nil {
		t.Fatalf("null value: %v", got[2])
	}
	forced := appendRecordsJSON(nil, recs[:1], true, false)
	var f []map[string]any
	if err := json.Unmarshal(forced, &f); err != nil || f[0]["value"] != base64.StdEncoding.EncodeToString([]byte("text")) || f[0]["keyEncoding"] != "base64" {
		t.Fatalf("forced base64: %s %v", forced, err)
	}
}

// TestRecordsJSONEmbedsJSONValues: on a JSON stream a JSON read embeds each
// value that is JSON as JSON ("value":{"item":"widget"}, where it once was
// the escaped string "{\"item\":…}"), flags the ambiguous ones (a JSON
// string or null) with valueEncoding "json", compacts line breaks away, and
// keeps strings or base64 for values that are not JSON; the page parses
// back as a JSON batch to the same values.
func TestRecordsJSONEmbedsJSONValues(t *testing.T) {
	recs := []record.Record{
		{Offset: 0, Value: []byte(`{"item":"widget","qty":2}`)},
		{Offset: 1, Value: []byte("[1,\n 2]\n")},
		{Offset: 2, Value: []byte(`"s"`)},
		{Offset: 3, Value: []byte(`null`)},
		{Offset: 4},
		{Offset: 5, Value: []byte(`not json`)},
		{Offset: 6, Value: []byte{'"', 0xff, '"'}},
		{Offset: 7, Value: []byte(`12.5`)},
	}
	out := appendRecordsJSON(nil, recs, false, true)
	want := `[{"offset":0,"timestamp":0,"value":{"item":"widget","qty":2}},` +
		`{"offset":1,"timestamp":0,"value":[1,2]},` +
		`{"offset":2,"timestamp":0,"value":"s","valueEncoding":"json"},` +
		`{"offset":3,"timestamp":0,"value":null,"valueEncoding":"json"},` +
		`{"offset":4,"timestamp":0,"value":null},` +
		`{"offset":5,"timestamp":0,"value":"not json"},` +
		`{"offset":6,"timestamp":0,"value":"Iv8i","valueEncoding":"base64"},` +
		`{"offset":7,"timestamp":0,"value":12.5}]`
	if string(out) != want {
		t.Fatalf("JSON stream page\n got %s\nwant %s", out, want)
	}
	back, err := parseJSONBatch(out, fuzzLimits)
	if err != nil {
		t.Fatalf("page does not parse back as a batch: %v", err)
	}
	for i, r := range back {
		wantV := recs[i].Value
		if i == 1 {
			wantV = []byte("[1,2]")
		}
		if (r.Value == nil) != (wantV == nil) || !bytes.Equal(r.Value, wantV) {
			t.Fatalf("record %d parsed back as %q, want %q", i, r.Value, wantV)
		}
	}
	if forced := appendRecordsJSON(nil, recs[:1], true, true); !bytes.Contains(forced, []byte(`"valueEncoding":"base64"`)) {
		t.Fatalf("encoding=base64 on a JSON stream: %s", forced)
	}
}

func BenchmarkRecordsJSON(b *testing.B) {
	recs := make([]record.Record, 100)
	val := []byte(`{"item":"widget","qty":2,"note":"a typical small JSON record of about a hundred bytes......"}`)
	for i := range recs {
		recs[i] = record.Record{Offset: int64(i), Timestamp: 1764406800123, Value: val}
	}
	// text: the values as escaped strings (a stream that is not JSON);
	// json: embedded as JSON (a JSON stream: validated, copied as is).
	for _, c := range []struct {
		name       string
		jsonValues bool
	}{{"text", false}, {"json", true}} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 0, 64<<10)
			b.ReportAllocs()
			b.SetBytes(int64(100 * len(val)))
			for b.Loop() {
				buf = appendRecordsJSON(buf[:0], recs, false, c.jsonValues)
			}
		})
	}
}

// UnmarshalJSON decodes a record of a JSON read for the tests: a value
// embedded as JSON (a JSON stream's, docs/api.md#formats) becomes its JSON
// text, so Value is always the stored value's text (or base64).
func (r *jsonRec) UnmarshalJSON(b []byte) error {
	var in wire.JSONRecord
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	v, err := in.ValueText()
	*r = jsonRec{Offset: in.Offset, Timestamp: in.Timestamp, Key: in.Key, KeyEncoding: in.KeyEncoding,
		Value: v, ValueEncoding: in.ValueEncoding, Headers: in.Headers}
	return err
}

// TestRecordsJSONAllocs: rendering records into a buffer large enough
// allocates nothing. A text value was copied into a string first (one
// allocation per record of every live page).
func TestRecordsJSONAllocs(t *testing.T) {
	recs := []record.Record{{Offset: 7, Timestamp: 1, Key: []byte("k"), Value: []byte("1764950000000000000 " + strings.Repeat("x", 80))}}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendRecordsJSON(buf[:0], recs, false, false) }); n != 0 {
		t.Fatalf("rendering one text record: %.0f allocations, want 0", n)
	}
	if !strings.Contains(string(buf), `"value":"1764950000000000000 xx`) {
		t.Fatalf("rendered %s", buf)
	}
}
