// Package recordbatch decodes a read page of stored batches
// (wire.MediaRecordBatches): Kafka RecordBatch v2 batches, uncompressed,
// concatenated exactly as the node stored them. The node hands them on
// without decoding them, so this is where their bytes are first checked
// since they were stored: every batch's CRC-32C, its framing and each
// record's lengths.
//
// The layout is Kafka's (docs/api.md#stored-batches): a 61-byte batch
// header, then records of zig-zag varint fields. Only what a node serves
// is accepted: magic 2, no compression, no control (transaction marker)
// batches.
package recordbatch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// HeaderSize is the fixed size of a batch header.
const HeaderSize = 61

// Offsets of the header fields used here.
const (
	offLength     = 8
	offMagic      = 16
	offCRC        = 17
	offAttributes = 21
	offLastDelta  = 23
	offFirstTS    = 27
	offMaxTS      = 35
	offNumRecords = 57
)

const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrControl       = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Error is a malformed page: Pos is the byte position in the page where
// the rule broke.
type Error struct {
	Pos int
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("record batches: at byte %d: %s", e.Pos, e.Msg) }

func errorf(pos int, format string, args ...any) error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// Decode appends the records of page to dst, skipping those below offset
// from (the page's first batch may begin before the offset the page was
// asked for), and returns dst. Keys, values and header values alias page;
// nil is null, distinct from empty. A page that breaks any rule of the
// layout is an *Error, and no records of it are returned.
func Decode(page []byte, from int64, dst []codec.Record) ([]codec.Record, error) {
	start := len(dst)
	err := Each(page, from, func(rec codec.Record) { dst = append(dst, rec) })
	if err != nil {
		clear(dst[start:])
		return dst[:start], err
	}
	return dst, nil
}

// Each calls each for every record of page at offset from or beyond, in
// order: the decode of Decode without a []codec.Record in between, for a
// caller that converts the records into its own type. A record is passed
// by value (a pointer would make every record escape to the heap); its
// key, value and header values alias page. On an error (an *Error) the
// records already passed to each belong to a malformed page and must be
// dropped.
func Each(page []byte, from int64, each func(rec codec.Record)) error {
	r := NewReader(page, from)
	for {
		rec, ok := r.Next()
		if !ok {
			return r.Err()
		}
		each(rec)
	}
}

// Reader decodes a page one record at a time, for a caller that hands
// records out as it goes (the Go client's Records iterator) and so needs
// no slice of a page's records at all. Each batch is checked whole (its
// CRC-32C, header and framing) when the Reader enters it, before any of
// its records is returned, and each record as it is decoded; a batch's
// trailing bytes are found once its last record is read. After an error
// Next returns false and Err says what broke: the records returned before
// it are those of the earlier, intact batches (and of the broken batch's
// records before the break, whose batch CRC held).
type Reader struct {
	page []byte
	from int64
	pos  int   // the current batch's start in page (its end once done)
	next int64 // the offset after the previous batch's last (-1: none)
	// The current batch: b its bytes, p the position of its next record,
	// i that record's index of count.
	b                    decoder
	p                    int
	i, count             int32
	base, firstTS, maxTS int64
	logAppendTime        bool
	err                  error
}

// NewReader returns a Reader of the records of page at offset from or
// beyond.
func NewReader(page []byte, from int64) Reader {
	return Reader{page: page, from: from, next: -1}
}

// Err returns what made Next return false, nil at the page's end.
func (r *Reader) Err() error { return r.err }

// Next returns the page's next record at from or beyond, false at the
// end or on an error. Its key, value and header values alias the page.
func (r *Reader) Next() (codec.Record, bool) {
	for r.err == nil {
		if r.i < r.count {
			rec, err := r.record()
			if err != nil {
				r.err = err
				break
			}
			if rec.Offset >= r.from {
				return rec, true
			}
			continue
		}
		if r.count > 0 { // the batch's records are all read
			if r.p != len(r.b.b) {
				r.err = errorf(r.pos+r.p, "%d bytes after the batch's %d records", len(r.b.b)-r.p, r.count)
				break
			}
			r.next = r.base + int64(r.count)
			r.pos += len(r.b.b)
			r.count = 0
		}
		if r.pos >= len(r.page) {
			return codec.Record{}, false
		}
		r.err = r.enter()
	}
	return codec.Record{}, false
}

// enter checks the batch at r.pos whole and makes it the current one.
func (r *Reader) enter() error {
	pos, b := r.pos, r.page[r.pos:]
	if len(b) >= HeaderSize {
		if base := int64(binary.BigEndian.Uint64(b)); base < r.next {
			return errorf(pos, "batch at offset %d after one that ended at %d: batches come in offset order", base, r.next-1)
		}
	}
	if len(b) < HeaderSize {
		return errorf(pos, "batch header needs %d bytes, %d left", HeaderSize, len(b))
	}
	if m := int8(b[offMagic]); m != 2 {
		return errorf(pos+offMagic, "magic %d, want 2", m)
	}
	length := int64(int32(binary.BigEndian.Uint32(b[offLength:])))
	size := length + 12
	if size < HeaderSize || size > int64(len(b)) {
		return errorf(pos+offLength, "batch length %d: the batch needs %d bytes, %d left", length, size, len(b))
	}
	b = b[:size]
	if got, want := crc32.Checksum(b[offAttributes:], castagnoli), binary.BigEndian.Uint32(b[offCRC:]); got != want {
		return errorf(pos+offCRC, "CRC-32C %08x, the batch's bytes give %08x", want, got)
	}
	attrs := binary.BigEndian.Uint16(b[offAttributes:])
	if c := attrs & attrCodecMask; c != 0 {
		return errorf(pos+offAttributes, "compressed batch (codec %d): a page of stored batches holds uncompressed ones", c)
	}
	if attrs&attrControl != 0 {
		return errorf(pos+offAttributes, "control batch: a page of stored batches holds records only")
	}
	base := int64(binary.BigEndian.Uint64(b))
	lastDelta := int32(binary.BigEndian.Uint32(b[offLastDelta:]))
	count := int32(binary.BigEndian.Uint32(b[offNumRecords:]))
	if base < 0 || count < 1 || lastDelta != count-1 || base > 1<<62 {
		return errorf(pos, "base offset %d, %d records, last offset delta %d: want base >= 0 and delta = records - 1", base, count, lastDelta)
	}
	if int64(count) > (size-HeaderSize)/7 {
		return errorf(pos+offNumRecords, "%d records cannot fit in %d bytes", count, size-HeaderSize)
	}
	r.b = decoder{b: b, base: pos}
	r.p, r.i, r.count = HeaderSize, 0, count
	r.base = base
	r.firstTS = int64(binary.BigEndian.Uint64(b[offFirstTS:]))
	r.maxTS = int64(binary.BigEndian.Uint64(b[offMaxTS:]))
	r.logAppendTime = attrs&attrLogAppendTime != 0
	return nil
}

// record decodes the current batch's next record.
func (r *Reader) record() (codec.Record, error) {
	var rec codec.Record
	p, err := r.b.record(r.p, &rec)
	if err != nil {
		return codec.Record{}, err
	}
	if rec.Offset != int64(r.i) {
		return codec.Record{}, errorf(r.pos, "record %d has offset delta %d, want %d", r.i, rec.Offset, r.i)
	}
	r.p = p
	r.i++
	rec.Offset += r.base
	if r.logAppendTime {
		rec.Timestamp = r.maxTS
	} else {
		rec.Timestamp += r.firstTS
	}
	return rec, nil
}

// decoder reads the records of one batch b, which starts at byte base of
// the page (for error positions).
type decoder struct {
	b    []byte
	base int
}

// record decodes the record at p into rec (Offset holds the offset
// delta, Timestamp the timestamp delta) and returns the position after it.
func (d *decoder) record(p int, rec *codec.Record) (int, error) {
	length, p, err := d.varint(p, "record length")
	if err != nil {
		return 0, err
	}
	if length < 1 || length > int64(len(d.b)-p) {
		return 0, errorf(d.base+p, "record length %d, %d bytes left", length, len(d.b)-p)
	}
	end := p + int(length)
	r := decoder{b: d.b[:end], base: d.base}
	p++ // attributes: unused
	if rec.Timestamp, p, err = r.varint(p, "timestamp delta"); err != nil {
		return 0, err
	}
	if rec.Offset, p, err = r.varint(p, "offset delta"); err != nil {
		return 0, err
	}
	if rec.Key, p, err = r.bytes(p, "key"); err != nil {
		return 0, err
	}
	if rec.Value, p, err = r.bytes(p, "value"); err != nil {
		return 0, err
	}
	nh, p, err := r.varint(p, "header count")
	if err != nil {
		return 0, err
	}
	if nh < 0 || nh > int64(end-p)/2 {
		return 0, errorf(d.base+p, "header count %d, %d bytes left in the record", nh, end-p)
	}
	if nh > 0 {
		rec.Headers = make([]codec.Header, nh)
		for i := range rec.Headers {
			var k []byte
			if k, p, err = r.bytes(p, "header key"); err != nil {
				return 0, err
			}
			if k == nil {
				return 0, errorf(d.base+p, "null header key")
			}
			rec.Headers[i].Key = string(k)
			if rec.Headers[i].Value, p, err = r.bytes(p, "header value"); err != nil {
				return 0, err
			}
		}
	}
	if p != end {
		return 0, errorf(d.base+p, "record length %d, but its fields end %d bytes off", length, end-p)
	}
	return p, nil
}

// varint reads a zig-zag varint of at most 10 bytes at p.
func (d *decoder) varint(p int, what string) (int64, int, error) {
	u, n := binary.Uvarint(d.b[p:])
	if n <= 0 {
		return 0, 0, errorf(d.base+p, "bad %s varint", what)
	}
	return int64(u>>1) ^ -int64(u&1), p + n, nil
}

// bytes reads a length-prefixed field at p: nil for length -1.
func (d *decoder) bytes(p int, what string) ([]byte, int, error) {
	// The varint is read here rather than by varint(p, what+" length"):
	// that concatenation allocated twice per record on every page.
	u, m := binary.Uvarint(d.b[p:])
	if m <= 0 {
		return nil, 0, errorf(d.base+p, "bad %s length varint", what)
	}
	n := int64(u>>1) ^ -int64(u&1)
	p += m
	if n == -1 {
		return nil, p, nil
	}
	if n < -1 || n > int64(len(d.b)-p) {
		return nil, 0, errorf(d.base+p, "%s length %d, %d bytes left", what, n, len(d.b)-p)
	}
	return d.b[p : p+int(n) : p+int(n)], p + int(n), nil
}
