// Package codec implements the Pico record codec: the binary batch format of
// the Pico protocol (media type application/vnd.picomq.batch). Appends may
// send it, reads may return it, and the server and the Go SDK both use this
// one implementation, so the two sides can never disagree on a byte.
//
// Why not Kafka's RecordBatch on the wire? It needs CRC-32C, zigzag varints
// and a per-batch offset/timestamp base that HTTP clients have no business
// computing. This format is deliberately dull: fixed-width big-endian
// integers and length prefixes, decodable in a few lines of any language
// (DataView in JavaScript, struct in Python) and without copying.
//
// # Layout
//
// All integers are big-endian. A frame is a header and count records:
//
//	frame   = magic:4 "PQB1"  count:u32  record*count
//	record  = length:u32                       ; bytes of the rest of this record
//	          offset:i64                       ; reads: the record's offset; appends: ignored (send 0)
//	          timestamp:i64                    ; reads: ms since the Unix epoch; appends: ignored (send 0)
//	          keyLength:i32    key             ; -1 = null key (no bytes follow)
//	          valueLength:i32  value           ; -1 = null value (a tombstone)
//	          headerCount:u32  header*headerCount
//	header  = keyLength:u32    key             ; a header key is never null
//	          valueLength:i32  value           ; -1 = null value
//
// A frame must contain exactly count records and nothing after the last. A
// record's length must equal the bytes its fields use. The version is in the
// magic, so a future incompatible layout gets a new magic, never a silent
// reinterpretation.
//
// Fixed cost: 8 bytes per frame, 36 per record, 8 per header.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// MediaType is the media type of a frame.
const MediaType = "application/vnd.picomq.batch"

// Magic opens every frame: "PQB1" (Pico batch, layout 1).
var Magic = [4]byte{'P', 'Q', 'B', '1'}

const (
	// FrameHeaderSize is magic plus count.
	FrameHeaderSize = 8
	// RecordOverhead is the size of a record with null key and value and no
	// headers, its length prefix included.
	RecordOverhead = 4 + 8 + 8 + 4 + 4 + 4
	// HeaderOverhead is the size of a header with empty key and null value.
	HeaderOverhead = 4 + 4
)

// ErrInvalid is matched (errors.Is) by every decoding error. The message says
// which record and which field broke which rule, at which byte.
var ErrInvalid = errors.New("codec: invalid Pico batch")

// Header is one record header. Headers are ordered and may repeat a key.
type Header struct {
	Key   string
	Value []byte // nil = null value, distinct from empty
}

// Record is one record of a frame. Key and Value distinguish null (nil) from
// empty (non-nil, zero length), as Kafka does.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Limits bound what Decode accepts, so a hostile frame cannot make the
// decoder allocate more than the caller allows. Zero fields mean no limit
// beyond the input's own size.
type Limits struct {
	MaxRecords int // records per frame
	MaxHeaders int // headers per record
}

func errorf(pos int, format string, args ...any) error {
	return fmt.Errorf("%w: byte %d: %s", ErrInvalid, pos, fmt.Sprintf(format, args...))
}

// Size returns the encoded size of r.
func Size(r *Record) int {
	n := RecordOverhead + len(r.Key) + len(r.Value)
	for i := range r.Headers {
		n += HeaderOverhead + len(r.Headers[i].Key) + len(r.Headers[i].Value)
	}
	return n
}

// AppendFrameHeader appends the frame header for count records.
func AppendFrameHeader(dst []byte, count int) []byte {
	dst = append(dst, Magic[:]...)
	return binary.BigEndian.AppendUint32(dst, uint32(count))
}

// AppendRecord appends r. Callers encoding a frame call AppendFrameHeader
// first with the number of records they will append.
func AppendRecord(dst []byte, r *Record) []byte {
	dst, start := BeginRecord(dst, r.Offset, r.Timestamp, r.Key, r.Value, len(r.Headers))
	for i := range r.Headers {
		dst = AppendHeader(dst, r.Headers[i].Key, r.Headers[i].Value)
	}
	return EndRecord(dst, start)
}

// BeginRecord starts a record whose headers the caller appends with
// AppendHeader (exactly numHeaders of them) before calling EndRecord with the
// returned start. It lets a server encode from its own record type without
// converting headers first.
func BeginRecord(dst []byte, offset, timestamp int64, key, value []byte, numHeaders int) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // length, patched by EndRecord
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(timestamp))
	dst = appendBytes(dst, key)
	dst = appendBytes(dst, value)
	return binary.BigEndian.AppendUint32(dst, uint32(numHeaders)), start
}

// AppendHeader appends one header of the record begun by BeginRecord.
func AppendHeader(dst []byte, key string, value []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
	dst = append(dst, key...)
	return appendBytes(dst, value)
}

// EndRecord patches the length of the record begun at start.
func EndRecord(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, math.MaxUint32) // -1
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// Encode returns recs as one frame.
func Encode(recs []Record) []byte {
	n := FrameHeaderSize
	for i := range recs {
		n += Size(&recs[i])
	}
	dst := AppendFrameHeader(make([]byte, 0, n), len(recs))
	for i := range recs {
		dst = AppendRecord(dst, &recs[i])
	}
	return dst
}

// Decode parses a frame into dst (reset to length 0) and returns it. Keys,
// values and header values alias b, so b must not be modified while the
// records are in use; header keys are copied into strings. All headers of
// the frame share one backing array, so decoding allocates a constant number
// of times per frame plus one string per header key.
func Decode(b []byte, dst []Record, lim Limits) ([]Record, error) {
	dst = dst[:0]
	if len(b) < FrameHeaderSize {
		return dst, errorf(0, "frame of %d bytes is shorter than its %d-byte header", len(b), FrameHeaderSize)
	}
	if [4]byte(b[:4]) != Magic {
		return dst, errorf(0, "magic %q, want %q (is the body really %s?)", b[:4], Magic[:], MediaType)
	}
	count := binary.BigEndian.Uint32(b[4:8])
	if lim.MaxRecords > 0 && uint64(count) > uint64(lim.MaxRecords) {
		return dst, errorf(4, "%d records, the limit is %d", count, lim.MaxRecords)
	}
	// Every record takes at least RecordOverhead bytes: a count the body
	// cannot hold is rejected before anything is allocated for it.
	if uint64(count)*RecordOverhead > uint64(len(b)-FrameHeaderSize) {
		return dst, errorf(4, "count %d needs at least %d bytes, the frame has %d after its header",
			count, uint64(count)*RecordOverhead, len(b)-FrameHeaderSize)
	}
	if cap(dst) < int(count) {
		dst = make([]Record, 0, count)
	}
	d := decoder{b: b, pos: FrameHeaderSize, lim: lim}
	// The first pass validates everything and counts headers; header-less
	// frames (the common case) are done after it. Otherwise a second pass
	// fills one shared header array sized exactly by the first.
	total := 0
	for i := 0; i < int(count); i++ {
		var r Record
		nh, err := d.record(i, &r, nil)
		if err != nil {
			return dst[:0], err
		}
		total += nh
		dst = append(dst, r)
	}
	if d.pos != len(b) {
		return dst[:0], errorf(d.pos, "%d bytes after the last of %d records", len(b)-d.pos, count)
	}
	if total == 0 {
		return dst, nil
	}
	pool := make([]Header, total)
	d.pos = FrameHeaderSize
	for i := range dst {
		if _, err := d.record(i, &dst[i], &pool); err != nil {
			return dst[:0], err // cannot happen: the first pass accepted it
		}
	}
	return dst, nil
}

type decoder struct {
	b   []byte
	pos int
	lim Limits
}

// record decodes the record at d.pos into r and returns its header count.
// With pool nil it only validates the headers; otherwise r.Headers takes the
// next headers of *pool and they are filled. d.pos moves past the record.
func (d *decoder) record(i int, r *Record, pool *[]Header) (int, error) {
	start := d.pos
	if len(d.b)-start < 4 {
		return 0, errorf(start, "record %d: truncated length", i)
	}
	n := binary.BigEndian.Uint32(d.b[start:])
	if uint64(n) > uint64(len(d.b)-start-4) {
		return 0, errorf(start, "record %d: length %d runs past the end of the frame (%d bytes left)", i, n, len(d.b)-start-4)
	}
	end := start + 4 + int(n)
	if int(n) < RecordOverhead-4 {
		return 0, errorf(start, "record %d: length %d is below the minimum %d", i, n, RecordOverhead-4)
	}
	p := start + 4
	r.Offset = int64(binary.BigEndian.Uint64(d.b[p:]))
	r.Timestamp = int64(binary.BigEndian.Uint64(d.b[p+8:]))
	p += 16
	var err error
	if r.Key, p, err = d.bytes(p, end, i, "key"); err != nil {
		return 0, err
	}
	if r.Value, p, err = d.bytes(p, end, i, "value"); err != nil {
		return 0, err
	}
	if end-p < 4 {
		return 0, errorf(p, "record %d: truncated header count", i)
	}
	nh := binary.BigEndian.Uint32(d.b[p:])
	if d.lim.MaxHeaders > 0 && uint64(nh) > uint64(d.lim.MaxHeaders) {
		return 0, errorf(p, "record %d: %d headers, the limit is %d", i, nh, d.lim.MaxHeaders)
	}
	if uint64(nh)*HeaderOverhead > uint64(end-p-4) {
		return 0, errorf(p, "record %d: %d headers cannot fit in the %d bytes left of the record", i, nh, end-p-4)
	}
	p += 4
	var hdrs []Header
	if pool != nil && nh > 0 {
		hdrs = (*pool)[:nh:nh]
		*pool = (*pool)[nh:]
		r.Headers = hdrs
	}
	for j := 0; j < int(nh); j++ {
		if end-p < 4 {
			return 0, errorf(p, "record %d header %d: truncated key length", i, j)
		}
		kl := binary.BigEndian.Uint32(d.b[p:])
		if uint64(kl) > uint64(end-p-4) {
			return 0, errorf(p, "record %d header %d: key length %d runs past the record", i, j, kl)
		}
		key := d.b[p+4 : p+4+int(kl)]
		p += 4 + int(kl)
		var v []byte
		if v, p, err = d.bytes(p, end, i, "header value"); err != nil {
			return 0, err
		}
		if hdrs != nil {
			hdrs[j] = Header{Key: string(key), Value: v}
		}
	}
	if p != end {
		return 0, errorf(p, "record %d: length says %d bytes, its fields use %d", i, n, p-start-4)
	}
	d.pos = end
	return int(nh), nil
}

// bytes reads an i32 length (-1 = nil) and that many bytes at p, within end.
func (d *decoder) bytes(p, end, i int, what string) ([]byte, int, error) {
	if end-p < 4 {
		return nil, p, errorf(p, "record %d: truncated %s length", i, what)
	}
	l := int32(binary.BigEndian.Uint32(d.b[p:]))
	p += 4
	if l == -1 {
		return nil, p, nil
	}
	if l < 0 {
		return nil, p, errorf(p-4, "record %d: %s length %d (only -1 may be negative)", i, what, l)
	}
	if int64(l) > int64(end-p) {
		return nil, p, errorf(p-4, "record %d: %s length %d runs past the record (%d bytes left)", i, what, l, end-p)
	}
	// Cap the capacity so an append to the value cannot overwrite the next
	// field of the frame.
	return d.b[p : p+int(l) : p+int(l)], p + int(l), nil
}
