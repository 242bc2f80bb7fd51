package ds

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// FuzzParseOffset: the offset parser never panics, accepts only the
// sentinels and the canonical digit form, and round-trips what it accepts.
func FuzzParseOffset(f *testing.F) {
	for _, s := range []string{"-1", "now", "0000000000000000_0000000000000000", "0000000000000000_0000000000000042",
		"9999999999999999_9999999999999999", "0_5", "0,1", "0 1", "", "../x", "a/..", "-2", "NOW", "0_", "_0",
		"00000000000000000_0", "0_00000000000000001", "0_-1", "0_+1", "1e3_0", "0__1", "0\x00_1", "0_1\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseOffset(s)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid offset") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			return
		}
		switch {
		case s == "now":
			if !o.now {
				t.Fatal("now not recognised")
			}
		case s == "-1":
			if o.now || o.record != 0 {
				t.Fatalf("-1 parsed as %+v", o)
			}
		default:
			if strings.ContainsAny(s, " ,/.\x00\r\n+-") {
				t.Fatalf("accepted %q", s)
			}
			if o.record < 0 || o.record > maxWireOffset {
				t.Fatalf("%q parsed to out-of-range %d", s, o.record)
			}
			// The canonical form of what was accepted parses back to it.
			back, err := parseOffset(formatOffset(o.record))
			if err != nil || back != o {
				t.Fatalf("%q → %+v → %q → %+v, %v", s, o, formatOffset(o.record), back, err)
			}
		}
	})
}

// FuzzFlattenJSON: flattening never panics; it accepts exactly the valid
// JSON bodies (minus an empty top-level array on append), and every value it
// returns is valid compact JSON; an array body yields its elements.
func FuzzFlattenJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[{"a":1},{"b":2}]`, `[[1,2],[3,4]]`, `[[[1,2,3]]]`, `[]`, ` [ ] `, `42`, `"s"`,
		`null`, `{ invalid json }`, `[1,`, `[1,2]]`, "[\"a\\nb\", {\"x\" : [ 1 , 2 ]}]", "\ufeff[1]", `[1e999]`, `{"a":"\u0000"}`,
		`["a,b", "c]d", "e\"f,", {"g":[1,{"h":"]"}]}, "\\", []]`, ` [ "x" ] `, `[[],{}]`, `"a,b"`, ` 7 `,
		"[\"\xff\"]", "{\"\xc3\":1}", "\"\xed\xa0\x80\""} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, allowEmpty bool) {
		vals, err := flattenJSON(body, allowEmpty)
		// The same values and errors as decoding the array and compacting
		// each element on its own (the implementation before the one-pass
		// split).
		refVals, refErr := flattenJSONReference(body, allowEmpty)
		if (err == nil) != (refErr == nil) || (err == errEmptyArray) != (refErr == errEmptyArray) || len(vals) != len(refVals) {
			t.Fatalf("%q: %q, %v; reference %q, %v", body, vals, err, refVals, refErr)
		}
		for i := range vals {
			if !bytes.Equal(vals[i], refVals[i]) {
				t.Fatalf("%q: value %d is %q, reference %q", body, i, vals[i], refVals[i])
			}
		}
		valid := wire.IsJSONText(body)
		if err != nil {
			if valid && err != errEmptyArray {
				t.Fatalf("valid JSON %q rejected: %v", body, err)
			}
			return
		}
		if !valid {
			t.Fatalf("invalid JSON %q accepted", body)
		}
		for _, v := range vals {
			if !wire.IsJSONText(v) {
				t.Fatalf("value %q of %q is not valid JSON", v, body)
			}
			var c bytes.Buffer
			_ = json.Compact(&c, v)
			if !bytes.Equal(c.Bytes(), v) {
				t.Fatalf("value %q is not compact", v)
			}
		}
		var top any
		_ = json.Unmarshal(body, &top)
		if arr, ok := top.([]any); ok {
			if len(vals) != len(arr) {
				t.Fatalf("array of %d flattened into %d values", len(arr), len(vals))
			}
		} else if len(vals) != 1 {
			t.Fatalf("non-array flattened into %d values", len(vals))
		}
		// The values joined back into an array are one valid JSON array.
		recs := appendJSONArray(nil, toRecordsForTest(vals))
		if !wire.IsJSONText(recs) {
			t.Fatalf("joined array %q is not valid", recs)
		}
	})
}

// FuzzSSEData: however a payload is made, its data event is one event whose
// data lines rebuild the payload (line ends normalised) and that no line
// can start a field or end the event early.
func FuzzSSEData(f *testing.F) {
	for _, s := range []string{"", "a", "a\nb", "a\r\nb", "a\rb", "\n\n", "x\r\n\r\nevent: control\r\ndata: {}\r\n\r\n", "\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev := string(appendSSEData(nil, payload))
		if !strings.HasPrefix(ev, "event: data\n") || !strings.HasSuffix(ev, "\n\n") {
			t.Fatalf("malformed event %q", ev)
		}
		body := strings.TrimSuffix(strings.TrimPrefix(ev, "event: data\n"), "\n\n")
		if strings.Contains(body, "\r") || strings.Contains(body, "\n\n") {
			t.Fatalf("event %q can be split by its data", ev)
		}
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if !strings.HasPrefix(l, "data:") {
				t.Fatalf("line %q is not a data field", l)
			}
			// What an SSE client keeps: the field value minus one
			// leading space.
			v := strings.TrimPrefix(l, "data:")
			lines = append(lines, strings.TrimPrefix(v, " "))
		}
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(payload))
		if got := strings.Join(lines, "\n"); got != want {
			t.Fatalf("data %q rebuilt as %q", want, got)
		}
	})
}

// flattenJSONReference is flattenJSON as first written: validate, decode
// a top-level array into its raw elements, compact each one.
func flattenJSONReference(body []byte, allowEmpty bool) ([][]byte, error) {
	if !wire.IsJSONText(body) {
		return nil, errInvalidJSON
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	compact := func(v []byte) []byte {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return bytes.TrimSpace(v)
		}
		return buf.Bytes()
	}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			return nil, errInvalidJSON
		}
		if len(elems) == 0 {
			if allowEmpty {
				return nil, nil
			}
			return nil, errEmptyArray
		}
		out := make([][]byte, len(elems))
		for i, e := range elems {
			out[i] = compact(e)
		}
		return out, nil
	}
	return [][]byte{compact(body)}, nil
}

func toRecordsForTest(vals [][]byte) []record.Record {
	out := make([]record.Record, len(vals))
	for i, v := range vals {
		out[i].Value = v
	}
	return out
}
