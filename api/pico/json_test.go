package pico

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/PicoMQ/picomq/record"
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
	out := appendRecordsJSON(nil, recs, false)
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
	forced := appendRecordsJSON(nil, recs[:1], true)
	var f []map[string]any
	if err := json.Unmarshal(forced, &f); err != nil || f[0]["value"] != base64.StdEncoding.EncodeToString([]byte("text")) || f[0]["keyEncoding"] != "base64" {
		t.Fatalf("forced base64: %s %v", forced, err)
	}
}

func BenchmarkRecordsJSON(b *testing.B) {
	recs := make([]record.Record, 100)
	val := []byte(`{"item":"widget","qty":2,"note":"a typical small JSON record of about a hundred bytes......"}`)
	for i := range recs {
		recs[i] = record.Record{Offset: int64(i), Timestamp: 1764406800123, Value: val}
	}
	buf := make([]byte, 0, 64<<10)
	b.ReportAllocs()
	b.SetBytes(int64(100 * len(val)))
	for b.Loop() {
		buf = appendRecordsJSON(buf[:0], recs, false)
	}
}
