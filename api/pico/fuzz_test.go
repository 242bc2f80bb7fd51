package pico

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

var fuzzLimits = batchLimits{maxRecords: 1000, maxRecordBytes: 1 << 20, maxHeaders: 64}

func sameRecords(a, b []record.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i].Key == nil) != (b[i].Key == nil) || (a[i].Value == nil) != (b[i].Value == nil) ||
			!bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) || len(a[i].Headers) != len(b[i].Headers) {
			return false
		}
		for j := range a[i].Headers {
			x, y := a[i].Headers[j], b[i].Headers[j]
			if x.Key != y.Key || (x.Value == nil) != (y.Value == nil) || !bytes.Equal(x.Value, y.Value) {
				return false
			}
		}
	}
	return true
}

// FuzzParseJSONBatch: the JSON batch parser never panics, rejects only with
// its own error classes, and whatever it accepts survives a trip through
// the JSON read format and back (reads and batch appends mirror).
func FuzzParseJSONBatch(f *testing.F) {
	for _, s := range []string{
		`[{"key":"k","value":"v","headers":[{"key":"h","value":"x"}]}]`,
		`[{"value":"/w==","valueEncoding":"base64"},{"value":null}]`,
		`[{"value":{"a":[1,2,{"b":null}]}},{"value":"s","valueEncoding":"json"}]`,
		`[{"value":null,"valueEncoding":"json"},{"value":" {\"a\":\n1} "},{"value":"\"s\""},{"value":"12"}]`,
		`[{"offset":3,"timestamp":4,"value":"echo","key":"AA==","keyEncoding":"base64"}]`,
		`[{"value":"x","headers":[{"key":"n","value":null},{"key":"b","value":"AQ==","valueEncoding":"base64"}]}]`,
		`[]`, `{}`, `null`, `[{"key":"k"}]`, `[{"value":1e999}]`, `[{"value":"\ud800"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, err := parseJSONBatch(body, fuzzLimits)
		if err != nil {
			if !errors.Is(err, errBadBatch) && !errors.Is(err, errTooManyRecords) && !errors.Is(err, errRecordTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(recs) == 0 {
			t.Fatal("accepted an empty batch")
		}
		// Non-string JSON values are stored as JSON text; rendered back
		// they are strings, which parse to the same bytes.
		page := appendRecordsJSON(nil, recs, false, false)
		again, err := parseJSONBatch(page, fuzzLimits)
		if err != nil {
			t.Fatalf("read page %s does not parse back: %v", page, err)
		}
		if !sameRecords(recs, again) {
			t.Fatalf("round trip changed records:\n%s\n%+v\n%+v", body, recs, again)
		}
		// Rendered as a JSON stream's page, JSON values are embedded as
		// JSON; they parse back to the same JSON (line breaks between
		// tokens may be compacted away), everything else to the same bytes.
		page = appendRecordsJSON(nil, recs, false, true)
		if again, err = parseJSONBatch(page, fuzzLimits); err != nil {
			t.Fatalf("JSON-stream page %s does not parse back: %v", page, err)
		}
		if len(again) != len(recs) {
			t.Fatalf("JSON-stream round trip: %d records, want %d", len(again), len(recs))
		}
		for i := range recs {
			if wire.IsJSONText(recs[i].Value) {
				if !sameJSON(recs[i].Value, again[i].Value) {
					t.Fatalf("JSON-stream round trip of %q gave %q (page %s)", recs[i].Value, again[i].Value, page)
				}
				again[i].Value = recs[i].Value
			}
		}
		if !sameRecords(recs, again) {
			t.Fatalf("JSON-stream round trip changed records:\n%s\n%s", body, page)
		}
	})
}

// sameJSON reports whether a and b are the same JSON text up to
// insignificant whitespace.
func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

// FuzzParseBinaryBatch: the server's binary append path (codec plus
// conversion and limits) never panics and round-trips through the binary
// read format.
func FuzzParseBinaryBatch(f *testing.F) {
	f.Add(codec.Encode([]codec.Record{{Key: []byte("k"), Value: []byte("v"), Headers: []codec.Header{{Key: "h"}}}}))
	f.Add(codec.Encode([]codec.Record{{}, {Value: []byte{}}}))
	f.Add([]byte("PQB1\x00\x00\x00\x02"))
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, _, err := parseBinaryBatch(body, fuzzLimits, nil)
		if err != nil {
			if !errors.Is(err, errBadBatch) && !errors.Is(err, errTooManyRecords) && !errors.Is(err, errRecordTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		out := appendRecordsBinary(nil, recs)
		if len(out) != binarySize(recs) {
			t.Fatalf("binarySize %d, encoded %d", binarySize(recs), len(out))
		}
		again, _, err := parseBinaryBatch(out, fuzzLimits, nil)
		if err != nil || !sameRecords(recs, again) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzRecordHeaders: Pico-Header-* parsing never panics, yields lower-case
// names, and one record header per field value.
func FuzzRecordHeaders(f *testing.F) {
	f.Add("Trace-Id", "abc", "b", "1")
	f.Add("", "x", "X-Y", "")
	f.Add("ÄÖ", "\xff", "a b", "c, d")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		h := http.Header{}
		h.Add(wire.HeaderRecordHeaderPrefix+n1, v1)
		h.Add(wire.HeaderRecordHeaderPrefix+n2, v2)
		h.Add("Other", "ignored")
		hdrs, err := parseRecordHeaders(h, 64)
		if err != nil {
			if !errors.Is(err, errBadHeader) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(hdrs) != 2 {
			t.Fatalf("%d headers from two fields", len(hdrs))
		}
		for _, x := range hdrs {
			if x.Key != strings.ToLower(x.Key) || x.Key == "" {
				t.Fatalf("header name %q", x.Key)
			}
		}
	})
}

// FuzzNegotiation: Accept, format and producer header parsing never panic
// and only fail with their documented error classes.
func FuzzNegotiation(f *testing.F) {
	f.Add("", "application/json;q=0.5, text/plain", "text/plain", "w", "0", "1")
	f.Add("raw", "*/*", "application/json", "", "x", "")
	f.Add("binary", "application/vnd.picomq.batch;q=2", "a/b", "id", "18446744073709551616", "00")
	f.Fuzz(func(t *testing.T, format, accept, streamCT, id, epoch, seq string) {
		if _, err := chooseFormat(format, accept, streamCT); err != nil && format == "" && !errors.Is(err, errNotAcceptable) {
			t.Fatalf("Accept %q: unclassified error %v", accept, err)
		}
		_, _, _ = appendShape(accept)
		h := http.Header{}
		for _, kv := range [][2]string{{wire.HeaderProducerID, id}, {wire.HeaderProducerEpoch, epoch}, {wire.HeaderProducerSeq, seq}} {
			if kv[1] != "" {
				h.Set(kv[0], kv[1])
			}
		}
		p, err := parseProducer(h)
		if err != nil && !errors.Is(err, errBadProducer) {
			t.Fatalf("unclassified producer error %v", err)
		}
		if p != nil && !strings.HasPrefix(p.ID, producerNamespace) {
			t.Fatalf("producer id %q not namespaced", p.ID)
		}
	})
}

// FuzzParseCompactionHeader: Pico-Compaction never panics the parser; a
// value it accepts describes itself back (the describe form, rendered as
// a header) to the same settings.
func FuzzParseCompactionHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		c, err := parseCompactionHeader(v)
		if err != nil || c == nil {
			return
		}
		var parts []string
		for _, kv := range stream.CompactionConfigs(c) {
			parts = append(parts, kv[0]+"="+kv[1])
		}
		again, err := parseCompactionHeader(strings.Join(parts, "; "))
		if err != nil || again == nil || *again != *c {
			t.Fatalf("%q parsed to %+v, its description %q to %+v (%v)", v, *c, strings.Join(parts, "; "), again, err)
		}
	})
}
