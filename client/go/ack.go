package picomq

import "bytes"

// parseAppendAck decodes the body of a successful Pico append as the
// server writes it (api/pico's appendAckJSON: these keys in this order,
// plain integers, "duplicate" only when true, the producer's numbers
// only for a producer's append), without encoding/json's reflection,
// which took 7 % of a producer's CPU in `picomq bench`. ok is false for
// anything else, which the caller decodes with encoding/json; whatever
// it accepts, encoding/json decodes to the same values
// (FuzzParseAppendAck).
func parseAppendAck(b []byte) (a appendAckJSON, ok bool) {
	p := ackParser{b: bytes.TrimRight(b, " \t\r\n")}
	var count int64
	ok = p.lit(`{"offset":`) && p.int(&a.Offset) &&
		p.lit(`,"nextOffset":`) && p.int(&a.NextOffset) &&
		p.lit(`,"timestamp":`) && p.int(&a.Timestamp) &&
		p.lit(`,"count":`) && p.int(&count)
	if !ok || int64(int(count)) != count {
		return appendAckJSON{}, false
	}
	a.Count = int(count)
	if p.lit(`,"duplicate":true`) {
		a.Duplicate = true
	}
	// The producer's numbers (uint64) are not kept: skipped as digits.
	if p.lit(`,"producerEpoch":`) && !(p.digits() && p.lit(`,"producerSeq":`) && p.digits()) {
		return appendAckJSON{}, false
	}
	if !p.lit("}") || len(p.b) != 0 {
		return appendAckJSON{}, false
	}
	return a, true
}

// ackParser consumes b from the front.
type ackParser struct{ b []byte }

// lit consumes s if b starts with it.
func (p *ackParser) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// digits consumes a JSON non-negative integer of any size (0 or a digit
// 1-9 followed by digits, no fraction or exponent).
func (p *ackParser) digits() bool {
	n := 0
	for n < len(p.b) && p.b[n] >= '0' && p.b[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && p.b[0] == '0') || (n < len(p.b) && (p.b[n] == '.' || p.b[n] == 'e' || p.b[n] == 'E')) {
		return false
	}
	p.b = p.b[n:]
	return true
}

// int consumes a JSON integer that fits an int64: an optional minus, then
// 0 or a digit 1-9 followed by digits; no fraction or exponent (those go
// to encoding/json, which refuses them for an integer field anyway).
func (p *ackParser) int(v *int64) bool {
	b := p.b
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 18 || (n > 1 && b[0] == '0') {
		return false // 19 digits may overflow: encoding/json decides
	}
	if n < len(b) && (b[n] == '.' || b[n] == 'e' || b[n] == 'E') {
		return false
	}
	var x int64
	for _, c := range b[:n] {
		x = x*10 + int64(c-'0')
	}
	if neg {
		x = -x
	}
	*v = x
	p.b = b[n:]
	return true
}
