package record

import (
	"fmt"
	"slices"
	"unsafe"
)

// DecodeRecords validates one complete batch (as Validate does), decompresses
// its records if needed, decodes every record and appends them to dst.
//
// Decoding is strict because a batch that decodes here is served to HTTP
// readers as authoritative data: the number of records must equal numRecords,
// offset deltas ascend strictly within the batch's span (record i of a dense
// batch carries delta i; a compacted batch has gaps), every length and varint must stay inside its
// record, each record's length prefix must match its fields exactly, and no
// bytes may follow the last record.
//
// Offsets are BaseOffset+delta. Timestamps are MaxTimestamp for LogAppendTime
// batches and FirstTimestamp+delta otherwise.
//
// Aliasing: nothing is copied per record. Keys, values and header values of an
// uncompressed batch are sub-slices of batch, so batch must stay unmodified
// while the records are in use; for a compressed batch they point into one
// buffer allocated by this call. Each sub-slice has its capacity clipped, so
// appending to one never overwrites its neighbour. Header keys are strings
// carved from one per-call buffer, not from batch, so they stay immutable
// even if the caller reuses batch.
//
// Allocation: with a dst of sufficient capacity, an uncompressed batch
// without headers decodes with no allocation; headers add a few per batch,
// never per record. On error dst is returned with its original length.
func DecodeRecords(batch []byte, dst []Record) ([]Record, error) {
	h, err := Validate(batch)
	if err != nil {
		return dst, err
	}
	data := batch[HeaderSize:]
	compressed := h.Codec() != CodecNone
	if compressed {
		if data, err = decompress(h.Codec(), data); err != nil {
			return dst, err
		}
		// The uncompressed case was checked by ParseHeader; this bound is
		// what keeps a lying numRecords from sizing dst.
		if int64(h.NumRecords)*minRecordSize > int64(len(data)) {
			return dst, &Error{Kind: ErrCorrupt, Batch: -1, Record: -1, Offset: -1, Decompressed: true,
				Detail: fmt.Sprintf("%d records cannot fit in %d decompressed bytes", h.NumRecords, len(data))}
		}
	}
	d := recordDecoder{data: data, h: h, compressed: compressed}
	return d.decode(dst)
}

// recordDecoder holds the state of one DecodeRecords call: the record bytes
// and the per-batch arenas that header keys and header slices are carved from.
type recordDecoder struct {
	data       []byte
	h          BatchHeader
	compressed bool

	// headers backs every record's Headers; records sub-slice it.
	headers []Header
	// keys backs every header key string. It is only ever appended to, so
	// bytes a string already points at are never written again, even when
	// append moves later keys to a new array.
	keys []byte
	// prevDelta is the previous record's offset delta.
	prevDelta int32
	// prev is the previous record's headers. Producers tend to put the same
	// header keys on every record in the same order, so header j's key is
	// usually prev[j].Key and can be shared instead of copied.
	prev []Header
}

func (d *recordDecoder) decode(dst []Record) ([]Record, error) {
	n := int(d.h.NumRecords)
	base := len(dst)
	out := slices.Grow(dst, n)[:base+n]
	recs := out[base:]
	pos := 0
	for i := range recs {
		next, err := d.record(&recs[i], i, pos)
		if err != nil {
			return dst, err
		}
		pos = next
	}
	if pos != len(d.data) {
		return dst, d.errorf(-1, pos, "%d bytes after the last record", len(d.data)-pos)
	}
	return out, nil
}

// record decodes record i, which starts at data[pos], into rec and returns
// the position after it.
func (d *recordDecoder) record(rec *Record, i, pos int) (int, error) {
	length, p, st := varint32(d.data, pos)
	if st != varintOK {
		return 0, d.varintError(i, pos, "record length", st)
	}
	if length < minRecordBodySize || int(length) > len(d.data)-p {
		return 0, d.errorf(i, pos, "record length %d, %d bytes remain", length, len(d.data)-p)
	}
	end := p + int(length)
	b := d.data[:end] // no field may read past the record's own end
	p++               // attributes: unused by Kafka, ignored

	tsDelta, q, st := varint64(b, p)
	if st != varintOK {
		return 0, d.varintError(i, p, "timestamp delta", st)
	}
	p = q
	offDelta, q, st := varint32(b, p)
	if st != varintOK {
		return 0, d.varintError(i, p, "offset delta", st)
	}
	// Offsets ascend within the batch's span: one per record in a
	// produced (dense) batch, with gaps after compaction.
	if offDelta < int32(i) || offDelta > d.h.LastOffsetDelta-int32(int(d.h.NumRecords)-1-i) || (i > 0 && offDelta <= d.prevDelta) {
		return 0, d.errorf(i, p, "offset delta %d out of order (record %d of %d, last delta %d)", offDelta, i, d.h.NumRecords, d.h.LastOffsetDelta)
	}
	d.prevDelta = offDelta
	p = q
	key, p, err := d.bytesField(b, i, p, "key")
	if err != nil {
		return 0, err
	}
	value, p, err := d.bytesField(b, i, p, "value")
	if err != nil {
		return 0, err
	}
	count, q, st := varint32(b, p)
	if st != varintOK {
		return 0, d.varintError(i, p, "header count", st)
	}
	if count < 0 || int(count) > (end-q)/minHeaderFieldSize {
		return 0, d.errorf(i, p, "header count %d, %d bytes remain in the record", count, end-q)
	}
	p = q
	var headers []Header
	if count > 0 {
		if headers, p, err = d.recordHeaders(b, i, p, int(count)); err != nil {
			return 0, err
		}
	}
	if p != end {
		return 0, d.errorf(i, pos, "record length %d, but its fields use %d bytes", length, int(length)-(end-p))
	}

	ts := d.h.MaxTimestamp
	if !d.h.LogAppendTime() {
		ts = d.h.FirstTimestamp + tsDelta
	}
	*rec = Record{
		Offset:    d.h.BaseOffset + int64(offDelta),
		Timestamp: ts,
		Key:       key,
		Value:     value,
		Headers:   headers,
	}
	return end, nil
}

// recordHeaders decodes count headers of record i starting at b[p] into the
// batch's arenas and returns the record's slice of them.
func (d *recordDecoder) recordHeaders(b []byte, i, p, count int) ([]Header, int, error) {
	if d.headers == nil {
		// Size the arena for every remaining record carrying as many headers
		// as this one, the common case, but never beyond what the remaining
		// bytes can hold, so a lying count cannot allocate.
		remaining := int(d.h.NumRecords) - i
		d.headers = make([]Header, 0, min(count*remaining, (len(d.data)-p)/minHeaderFieldSize))
	}
	first := len(d.headers)
	for j := range count {
		klen, q, st := varint32(b, p)
		if st != varintOK {
			return nil, 0, d.varintError(i, p, "header key length", st)
		}
		if klen < 0 || int(klen) > len(b)-q {
			return nil, 0, d.errorf(i, p, "header key length %d, %d bytes remain in the record", klen, len(b)-q)
		}
		p = q
		var hkey string
		if klen > 0 {
			k := b[p : p+int(klen)]
			if j < len(d.prev) && d.prev[j].Key == string(k) { // compares without converting
				hkey = d.prev[j].Key
			} else {
				hkey = d.keyString(k, int(count-j))
			}
			p += int(klen)
		}
		value, q, err := d.bytesField(b, i, p, "header value")
		if err != nil {
			return nil, 0, err
		}
		p = q
		d.headers = append(d.headers, Header{Key: hkey, Value: value})
	}
	d.prev = d.headers[first:len(d.headers):len(d.headers)]
	return d.prev, p, nil
}

// keyString copies k into the key arena and returns it as a string without a
// second copy. This is sound because the arena is private to this call and
// only ever appended to: the bytes behind a returned string are never written
// again, which is the whole of Go's string immutability contract. left is how
// many keys of the current record remain, k included.
func (d *recordDecoder) keyString(k []byte, left int) string {
	if d.keys == nil {
		// Room for the rest of this record's keys if they are as long as
		// this one, and a little more: later records mostly share them (see
		// prev), and append grows the arena when they do not.
		d.keys = make([]byte, 0, min(max(len(k)*left, minKeyArena), len(d.data)))
	}
	off := len(d.keys)
	d.keys = append(d.keys, k...)
	return unsafe.String(&d.keys[off], len(k))
}

// bytesField decodes a length-prefixed byte string (-1 = nil) at b[p] and
// returns a capacity-clipped sub-slice of b.
func (d *recordDecoder) bytesField(b []byte, i, p int, what string) ([]byte, int, error) {
	n, q, st := varint32(b, p)
	if st != varintOK {
		return nil, 0, d.varintError(i, p, what+" length", st)
	}
	switch {
	case n == -1:
		return nil, q, nil
	case n < -1 || int(n) > len(b)-q:
		return nil, 0, d.errorf(i, p, "%s length %d, %d bytes remain in the record", what, n, len(b)-q)
	}
	end := q + int(n)
	return b[q:end:end], end, nil
}

// errorf reports corrupt record data at byte pos of the record data. For an
// uncompressed batch that is converted to a position in the batch.
func (d *recordDecoder) errorf(i, pos int, format string, args ...any) error {
	e := &Error{Kind: ErrCorrupt, Batch: -1, Record: i, Offset: pos, Decompressed: d.compressed,
		Detail: fmt.Sprintf(format, args...)}
	if !d.compressed {
		e.Offset += HeaderSize
	}
	return e
}

func (d *recordDecoder) varintError(i, pos int, what string, st varintStatus) error {
	if st == varintShort {
		return d.errorf(i, pos, "%s: varint runs past the end of the record", what)
	}
	return d.errorf(i, pos, "%s: varint too long for its type", what)
}

// minKeyArena keeps batches whose header keys vary from growing the key
// arena a few bytes at a time.
const minKeyArena = 256

type varintStatus uint8

const (
	varintOK varintStatus = iota
	varintShort
	varintOverflow
)

// uvarint decodes an unsigned LEB128 number of at most maxBytes bytes at
// b[pos]. lastMax is the largest value the final byte may carry so the result
// fits the field's width; Kafka's own reader rejects longer encodings too.
func uvarint(b []byte, pos, maxBytes int, lastMax byte) (uint64, int, varintStatus) {
	var x uint64
	var s uint
	for i := range maxBytes {
		if pos >= len(b) {
			return 0, pos, varintShort
		}
		c := b[pos]
		pos++
		if c < 0x80 {
			if i == maxBytes-1 && c > lastMax {
				return 0, pos, varintOverflow
			}
			return x | uint64(c)<<s, pos, varintOK
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, pos, varintOverflow
}

// varint32 decodes a zigzag varint that must fit 32 bits (5 bytes at most).
func varint32(b []byte, pos int) (int32, int, varintStatus) {
	if pos < len(b) && b[pos] < 0x80 {
		c := int32(b[pos])
		return (c >> 1) ^ -(c & 1), pos + 1, varintOK
	}
	u, pos, st := uvarint(b, pos, 5, 0x0f)
	x := uint32(u)
	return int32(x>>1) ^ -int32(x&1), pos, st
}

// varint64 decodes a zigzag varlong (10 bytes at most).
func varint64(b []byte, pos int) (int64, int, varintStatus) {
	if pos < len(b) && b[pos] < 0x80 {
		c := int64(b[pos])
		return (c >> 1) ^ -(c & 1), pos + 1, varintOK
	}
	u, pos, st := uvarint(b, pos, 10, 0x01)
	return int64(u>>1) ^ -int64(u&1), pos, st
}
