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
// caller that converts the records into its own type (the Go client's
// page decode, where a slice of codec.Record per page was a third of the
// memory it allocated for a page's records). A record is passed by value
// (a pointer would make every record escape to the heap); its key, value
// and header values alias page. On an error (an *Error) the records
// already passed to each belong to a malformed page and must be dropped.
func Each(page []byte, from int64, each func(rec codec.Record)) error {
	next := int64(-1) // the offset after the previous batch's last
	for pos := 0; pos < len(page); {
		if len(page)-pos >= HeaderSize {
			if base := int64(binary.BigEndian.Uint64(page[pos:])); base < next {
				return errorf(pos, "batch at offset %d after one that ended at %d: batches come in offset order", base, next-1)
			}
		}
		n, err := decodeBatch(page, pos, from, each)
		if err != nil {
			return err
		}
		next = int64(binary.BigEndian.Uint64(page[pos:])) + int64(binary.BigEndian.Uint32(page[pos+offLastDelta:])) + 1
		pos += n
	}
	return nil
}

// decodeBatch decodes the batch at page[pos:], calls each for its records
// at from or beyond, and returns its size.
func decodeBatch(page []byte, pos int, from int64, each func(codec.Record)) (int, error) {
	b := page[pos:]
	if len(b) < HeaderSize {
		return 0, errorf(pos, "batch header needs %d bytes, %d left", HeaderSize, len(b))
	}
	if m := int8(b[offMagic]); m != 2 {
		return 0, errorf(pos+offMagic, "magic %d, want 2", m)
	}
	length := int64(int32(binary.BigEndian.Uint32(b[offLength:])))
	size := length + 12
	if size < HeaderSize || size > int64(len(b)) {
		return 0, errorf(pos+offLength, "batch length %d: the batch needs %d bytes, %d left", length, size, len(b))
	}
	b = b[:size]
	if got, want := crc32.Checksum(b[offAttributes:], castagnoli), binary.BigEndian.Uint32(b[offCRC:]); got != want {
		return 0, errorf(pos+offCRC, "CRC-32C %08x, the batch's bytes give %08x", want, got)
	}
	attrs := binary.BigEndian.Uint16(b[offAttributes:])
	if c := attrs & attrCodecMask; c != 0 {
		return 0, errorf(pos+offAttributes, "compressed batch (codec %d): a page of stored batches holds uncompressed ones", c)
	}
	if attrs&attrControl != 0 {
		return 0, errorf(pos+offAttributes, "control batch: a page of stored batches holds records only")
	}
	base := int64(binary.BigEndian.Uint64(b))
	lastDelta := int32(binary.BigEndian.Uint32(b[offLastDelta:]))
	firstTS := int64(binary.BigEndian.Uint64(b[offFirstTS:]))
	maxTS := int64(binary.BigEndian.Uint64(b[offMaxTS:]))
	count := int32(binary.BigEndian.Uint32(b[offNumRecords:]))
	if base < 0 || count < 1 || lastDelta != count-1 || base > 1<<62 {
		return 0, errorf(pos, "base offset %d, %d records, last offset delta %d: want base >= 0 and delta = records - 1", base, count, lastDelta)
	}
	if int64(count) > (size-HeaderSize)/7 {
		return 0, errorf(pos+offNumRecords, "%d records cannot fit in %d bytes", count, size-HeaderSize)
	}
	d := decoder{b: b, base: pos}
	p := HeaderSize
	for i := range count {
		var rec codec.Record
		var err error
		if p, err = d.record(p, &rec); err != nil {
			return 0, err
		}
		off := rec.Offset
		rec.Offset = base + off
		if off != int64(i) {
			return 0, errorf(pos, "record %d has offset delta %d, want %d", i, off, i)
		}
		if attrs&attrLogAppendTime != 0 {
			rec.Timestamp = maxTS
		} else {
			rec.Timestamp += firstTS
		}
		if rec.Offset >= from {
			each(rec)
		}
	}
	if p != len(b) {
		return 0, errorf(pos+p, "%d bytes after the batch's %d records", len(b)-p, count)
	}
	return int(size), nil
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
