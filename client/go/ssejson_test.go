package picomq

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// Events as the node renders them (api/pico appendRecordsJSON,
// appendControl): the live tail's shapes.
var (
	liveDataEvent    = []byte(`[{"offset":12345,"timestamp":1764912345678,"value":"1764912345678901234 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]`)
	liveControlEvent = []byte(`{"nextOffset":12346,"upToDate":true,"closed":false,"cursor":"c1"}`)
)

// TestSSEDecodeAllocs: a live tail decodes a data and a control event per
// append; with encoding/json that was 15+ allocations (docs/benchmarks.md).
func TestSSEDecodeAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := decodeDataEvent(liveDataEvent); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeControlEvent(liveControlEvent, "c1"); err != nil {
			t.Fatal(err)
		}
	})
	// The record slice and its Position. Its Body was a copy, and the
	// control event's cursor a new string even when it was the last one.
	if allocs > 2 {
		t.Errorf("decoding a one-record data event and its control event: %.0f allocations, want at most 2", allocs)
	}
}

// TestSSEBodyAliasesData: a record's text body aliases the event's data
// but is capped: appending to it leaves the data, and so the records
// after it, as they were.
func TestSSEBodyAliasesData(t *testing.T) {
	data := []byte(`[{"offset":1,"timestamp":2,"value":"ab"},{"offset":2,"timestamp":3,"key":"k","value":"cd"}]`)
	orig := string(data)
	recs, err := decodeDataEvent(data)
	if err != nil || len(recs) != 2 {
		t.Fatalf("%v %v", recs, err)
	}
	_ = append(recs[0].Body, "XXXXXXXX"...)
	_ = append(recs[1].Key, "YYYY"...)
	if string(data) != orig || string(recs[1].Body) != "cd" || string(recs[1].Key) != "k" {
		t.Fatalf("data %q, second record %q/%q after appending to the bodies", data, recs[1].Key, recs[1].Body)
	}
	c, err := decodeControlEvent([]byte(`{"nextOffset":3,"upToDate":true,"closed":false,"cursor":"c9"}`), "c1")
	if err != nil || c.Cursor != "c9" || c.NextOffset != 3 {
		t.Fatalf("%+v %v: a new cursor", c, err)
	}
}

// TestFastSSEJSONMatchesEncodingJSON: what the fast path takes it decodes
// as encoding/json does; what it declines still decodes.
func TestFastSSEJSONMatchesEncodingJSON(t *testing.T) {
	taken := [][]byte{
		liveDataEvent,
		[]byte(`[]`),
		[]byte(`[{"offset":0,"timestamp":-5,"key":"k","value":null},{"offset":1,"timestamp":2,"key":"aGk=","keyEncoding":"base64","value":"AAEC","valueEncoding":"base64"}]`),
		[]byte(`[{"offset":3,"timestamp":4,"value":"","valueEncoding":"utf8"}]`),
		[]byte(`[{"offset":3,"timestamp":4,"value":"héllo"}]`),
	}
	declined := [][]byte{
		[]byte(`[{"offset":3,"timestamp":4,"value":{"a":1}}]`),                     // embedded JSON
		[]byte(`[{"offset":3,"timestamp":4,"value":"a\nb"}]`),                      // an escape
		[]byte(`[{"offset":3,"timestamp":4,"value":"x","headers":[{"key":"h"}]}]`), // headers
		[]byte(`[{"timestamp":4,"offset":3,"value":"x"}]`),                         // field order
		[]byte(` [{"offset":3,"timestamp":4,"value":"x"}]`),                        // whitespace
		[]byte(`[{"offset":3,"timestamp":4,"value":"\"s\"","valueEncoding":"json"}]`),
	}
	for _, in := range taken {
		if _, ok := fastJSONRecords(in); !ok {
			t.Errorf("fast path declined %s", in)
		}
		checkFastRecords(t, in)
	}
	for _, in := range declined {
		if _, ok := fastJSONRecords(in); ok {
			t.Errorf("fast path took %s", in)
		}
		if _, err := decodeDataEvent(in); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	for _, in := range [][]byte{liveControlEvent, []byte(`{"nextOffset":0,"upToDate":false,"closed":true,"cursor":""}`)} {
		if _, ok := fastControlEvent(in, ""); !ok {
			t.Errorf("fast path declined %s", in)
		}
		checkFastControl(t, in)
	}
}

func checkFastRecords(t *testing.T, in []byte) {
	t.Helper()
	fast, ok := fastJSONRecords(in)
	if !ok {
		return
	}
	slow, err := decodeJSONRecords(in)
	if err != nil {
		t.Fatalf("fast path took %q, encoding/json refuses it: %v", in, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: fast path %#v, encoding/json %#v", in, fast, slow)
	}
}

func checkFastControl(t *testing.T, in []byte) {
	t.Helper()
	fast, ok := fastControlEvent(in, "")
	if !ok {
		return
	}
	var slow wire.ControlEvent
	if err := json.Unmarshal(in, &slow); err != nil {
		t.Fatalf("fast path took %q, encoding/json refuses it: %v", in, err)
	}
	if fast != slow {
		t.Fatalf("%q: fast path %+v, encoding/json %+v", in, fast, slow)
	}
}

// FuzzFastSSEJSON: the fast decoders never disagree with encoding/json.
func FuzzFastSSEJSON(f *testing.F) {
	f.Add(liveDataEvent)
	f.Add(liveControlEvent)
	f.Add([]byte(`[{"offset":0,"timestamp":-5,"key":"k","value":null},{"offset":1,"timestamp":2,"key":"aGk=","keyEncoding":"base64","value":"AAEC","valueEncoding":"base64"}]`))
	f.Add([]byte(`[{"offset":01,"timestamp":4,"value":"x"}]`))
	f.Add([]byte(`[{"offset":1e3,"timestamp":4,"value":"x"}]`))
	f.Add([]byte(`[{"offset":99999999999999999999,"timestamp":4,"value":"x"}]`))
	f.Add([]byte(`[{"offset":1,"timestamp":4,"value":"\xff"}]`))
	f.Add([]byte(`[{"offset":1,"timestamp":4,"value":"YQ","valueEncoding":"base64"}]`))
	f.Add([]byte(`{"nextOffset":-0,"upToDate":true,"closed":false,"cursor":"x"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkFastRecords(t, in)
		checkFastControl(t, in)
	})
}

func BenchmarkSSEDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeDataEvent(liveDataEvent); err != nil {
			b.Fatal(err)
		}
		if _, err := decodeControlEvent(liveControlEvent, ""); err != nil {
			b.Fatal(err)
		}
	}
}
