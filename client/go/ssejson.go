package picomq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// A live tail decodes one SSE data event and one control event per append.
// encoding/json took 4-7 µs and 20 allocations for such a pair on the
// reader's critical path (docs/benchmarks.md, "Live tail and catch-up,
// issue 31 again"), so the shapes the node renders are parsed by hand
// here: records of offset, timestamp, an optional key and a string or null
// value, in the node's field order, with no escapes in their strings. Any
// other input (headers, embedded JSON values, escapes, another field order)
// is left to encoding/json: the fast path either returns exactly what
// encoding/json would or declines (FuzzFastSSEJSON checks it).

// decodeDataEvent decodes the records of a Pico SSE data event. Their
// text keys and bodies may alias data, which the caller gives up: an SSE
// event's data is its own allocation (sseReader.next), and copying each
// body out of it again was an allocation and a copy per record on the
// live tail's path.
func decodeDataEvent(data []byte) ([]Record, error) {
	if recs, ok := fastJSONRecords(data); ok {
		return recs, nil
	}
	return decodeJSONRecords(data)
}

// decodeControlEvent decodes a Pico SSE control event. prevCursor is the
// cursor of the event before: the node's cursor changes far less often
// than every event, and when it is the same its string is reused instead
// of allocated again.
func decodeControlEvent(data []byte, prevCursor string) (wire.ControlEvent, error) {
	if c, ok := fastControlEvent(data, prevCursor); ok {
		return c, nil
	}
	var c wire.ControlEvent
	err := json.Unmarshal(data, &c)
	return c, err
}

// fastJSONRecords decodes data, a JSON array of Pico read records, or
// reports ok=false when data is not in the simple shape it handles.
func fastJSONRecords(data []byte) (recs []Record, ok bool) {
	p := jsonScan{b: data}
	if !p.lit("[") {
		return nil, false
	}
	if p.lit("]") {
		return []Record{}, p.end()
	}
	// One allocation for the records of a typical live event.
	recs = make([]Record, 0, max(1, bytes.Count(data, []byte(`{"offset":`))))
	for {
		var r Record
		if !p.lit(`{"offset":`) {
			return nil, false
		}
		off, ok := p.int()
		if !ok || !p.lit(`,"timestamp":`) {
			return nil, false
		}
		ts, ok := p.int()
		if !ok {
			return nil, false
		}
		r.Position = strconv.FormatInt(off, 10)
		r.Timestamp = time.UnixMilli(ts)
		if p.lit(`,"key":`) {
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			if r.Key, ok = p.encoded(k, `,"keyEncoding":`); !ok {
				return nil, false
			}
		}
		if !p.lit(`,"value":`) {
			return nil, false
		}
		if !p.lit("null") {
			v, ok := p.str()
			if !ok {
				return nil, false
			}
			if r.Body, ok = p.encoded(v, `,"valueEncoding":`); !ok {
				return nil, false
			}
		}
		if !p.lit("}") {
			return nil, false
		}
		recs = append(recs, r)
		if p.lit("]") {
			return recs, p.end()
		}
		if !p.lit(",") {
			return nil, false
		}
	}
}

// fastControlEvent decodes the control event the node renders
// (appendControl's field order), or reports ok=false.
func fastControlEvent(data []byte, prevCursor string) (c wire.ControlEvent, ok bool) {
	p := jsonScan{b: data}
	if !p.lit(`{"nextOffset":`) {
		return c, false
	}
	if c.NextOffset, ok = p.int(); !ok || !p.lit(`,"upToDate":`) {
		return c, false
	}
	if c.UpToDate, ok = p.bool(); !ok || !p.lit(`,"closed":`) {
		return c, false
	}
	if c.Closed, ok = p.bool(); !ok || !p.lit(`,"cursor":`) {
		return c, false
	}
	cur, ok := p.str()
	if !ok || !p.lit("}") || !p.end() {
		return c, false
	}
	if string(cur) == prevCursor {
		c.Cursor = prevCursor
	} else {
		c.Cursor = string(cur)
	}
	return c, true
}

// jsonScan reads the fixed shapes above from b; every method returns false
// (and the caller gives up) on anything else.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

func (p *jsonScan) end() bool { return p.i == len(p.b) }

// int reads a JSON integer that fits an int64 without a leading zero,
// fraction or exponent (what the node writes).
func (p *jsonScan) int() (int64, bool) {
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	d := j
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == d || j-d > 18 || (p.b[d] == '0' && j-d > 1) {
		return 0, false // none, possibly out of range, or a leading zero
	}
	if j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return n, true
}

func (p *jsonScan) bool() (bool, bool) {
	if p.lit("true") {
		return true, true
	}
	return false, p.lit("false")
}

// str reads a JSON string without escapes or control characters and
// returns its bytes (aliasing b); invalid UTF-8 is declined, as
// encoding/json would replace it.
func (p *jsonScan) str() ([]byte, bool) {
	if !p.lit(`"`) {
		return nil, false
	}
	j := p.i
	for j < len(p.b) && p.b[j] != '"' {
		if c := p.b[j]; c == '\\' || c < 0x20 {
			return nil, false
		}
		j++
	}
	if j == len(p.b) || !utf8.Valid(p.b[p.i:j]) {
		return nil, false
	}
	s := p.b[p.i:j]
	p.i = j + 1
	return s, true
}

// encoded returns s decoded per the encoding field named by field if it
// follows ("base64"), else s itself (UTF-8 text), capped so that an
// append to it cannot write over the bytes after it: the records alias
// the event's data (see decodeDataEvent).
func (p *jsonScan) encoded(s []byte, field string) ([]byte, bool) {
	if !p.lit(field) {
		return s[:len(s):len(s)], true
	}
	enc, ok := p.str()
	if !ok {
		return nil, false
	}
	switch string(enc) {
	case "", wire.EncodingUTF8:
		return s[:len(s):len(s)], true
	case wire.EncodingBase64:
		out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(out, s)
		if err != nil {
			return nil, false
		}
		return out[:n], true
	}
	return nil, false
}
