package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/extent"
)

// These constants are part of the object format and must not change; a new
// layout gets a new Version.
const (
	// Magic opens the trailer.
	Magic = "PicoMQsg"
	// Version is the format version this package writes and reads.
	Version = 1
	// TrailerSize is the fixed size of the trailer at the end of every object.
	TrailerSize = 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

var (
	// ErrCorrupt is matched (errors.Is) by every *CorruptionError.
	ErrCorrupt = errors.New("segment: corrupt object")
	// ErrOffsetOutOfRange: the object does not hold the requested offset of
	// the stream (or the stream at all); the caller picked the wrong object.
	ErrOffsetOutOfRange = errors.New("segment: offset not in this object")
	// ErrInvalidBatch: Writer.Append was given bytes that are not a valid
	// RecordBatch v2, or that do not continue the stream.
	ErrInvalidBatch = errors.New("segment: invalid batch")
)

// CorruptionError reports damage found in an object: which object, where,
// and which rule the bytes broke.
type CorruptionError struct {
	Key    string // object key ("" when decoding bytes without a key)
	Pos    int64  // byte position in the object, -1 if unknown
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("segment: corrupt object %q at byte %d: %s", e.Key, e.Pos, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(key string, pos int64, format string, args ...any) error {
	return &CorruptionError{Key: key, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

// Trailer is the decoded fixed trailer.
type Trailer struct {
	FooterLen uint32
	DataLen   uint64
	FooterCRC uint32
}

func appendTrailer(b []byte, t Trailer) []byte {
	start := len(b)
	b = append(b, Magic...)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, t.FooterLen)
	b = binary.BigEndian.AppendUint64(b, t.DataLen)
	b = binary.BigEndian.AppendUint32(b, t.FooterCRC)
	return binary.BigEndian.AppendUint32(b, crc32c(b[start:]))
}

// ParseTrailer decodes and checks the last TrailerSize bytes of an object
// of the given size.
func ParseTrailer(b []byte, size int64) (Trailer, error) {
	if len(b) != TrailerSize {
		return Trailer{}, corruptf("", size-int64(len(b)), "trailer is %d bytes, want %d", len(b), TrailerSize)
	}
	pos := size - TrailerSize
	if string(b[:8]) != Magic {
		return Trailer{}, corruptf("", pos, "bad magic %q (not a PicoMQ segment, or truncated)", b[:8])
	}
	if got, want := binary.BigEndian.Uint32(b[28:]), crc32c(b[:28]); got != want {
		return Trailer{}, corruptf("", pos, "trailer CRC %08x, computed %08x", got, want)
	}
	if v := binary.BigEndian.Uint16(b[8:]); v != Version {
		return Trailer{}, corruptf("", pos, "format version %d, this build reads %d", v, Version)
	}
	if f := binary.BigEndian.Uint16(b[10:]); f != 0 {
		return Trailer{}, corruptf("", pos, "unknown flags %#x", f)
	}
	t := Trailer{
		FooterLen: binary.BigEndian.Uint32(b[12:]),
		DataLen:   binary.BigEndian.Uint64(b[16:]),
		FooterCRC: binary.BigEndian.Uint32(b[24:]),
	}
	if t.DataLen > math.MaxInt64/2 || int64(t.DataLen)+int64(t.FooterLen)+TrailerSize != size {
		return Trailer{}, corruptf("", pos, "data %d + footer %d + trailer %d != object size %d", t.DataLen, t.FooterLen, TrailerSize, size)
	}
	return t, nil
}

// IndexEntry locates one batch: its base offset, its byte position in the
// object, and the largest batch maxTimestamp from the stream's start through
// the batches before the next entry.
type IndexEntry struct {
	Offset, Pos, MaxTimestamp int64
}

// streamIndex is one stream's footer record.
type streamIndex struct {
	extent.Extent
	index []IndexEntry
}

// Footer is the decoded footer of an object.
type Footer struct {
	streams []streamIndex
}

// Streams returns the entries of every stream in the object, in ascending
// stream id.
func (f *Footer) Streams() []extent.Extent {
	out := make([]extent.Extent, len(f.streams))
	for i, s := range f.streams {
		out[i] = s.Extent
	}
	return out
}

func appendFooter(b []byte, streams []streamIndex) []byte {
	b = binary.AppendUvarint(b, uint64(len(streams)))
	for _, s := range streams {
		b = binary.AppendUvarint(b, s.StreamID)
		b = binary.AppendUvarint(b, uint64(s.First))
		b = binary.AppendUvarint(b, uint64(s.Last()-s.First))
		b = binary.AppendUvarint(b, uint64(s.Length))
		b = binary.BigEndian.AppendUint32(b, s.CRC)
		b = binary.AppendVarint(b, s.FirstTimestamp)
		b = binary.AppendVarint(b, s.MaxTimestamp)
		b = binary.AppendUvarint(b, uint64(s.Batches))
		b = binary.AppendUvarint(b, uint64(len(s.index)))
		prev := IndexEntry{Offset: s.First, Pos: s.Offset, MaxTimestamp: s.FirstTimestamp}
		for _, e := range s.index {
			b = binary.AppendUvarint(b, uint64(e.Offset-prev.Offset))
			b = binary.AppendUvarint(b, uint64(e.Pos-prev.Pos))
			b = binary.AppendVarint(b, e.MaxTimestamp-prev.MaxTimestamp)
			prev = e
		}
	}
	return b
}

// decoder reads varints with a sticky error, so DecodeFooter reads like
// the format description and checks bounds in one place.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) uvarint(what string) uint64 { return readVarint(d, what, binary.Uvarint) }

func (d *decoder) varint(what string) int64 { return readVarint(d, what, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](d *decoder, what string, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.b[d.off:])
	if n <= 0 {
		d.fail("footer byte %d: bad or truncated %s", d.off, what)
		return 0
	}
	d.off += n
	return v
}

// int63 reads a uvarint that must fit an int64.
func (d *decoder) int63(what string) int64 {
	v := d.uvarint(what)
	if v > math.MaxInt64 {
		d.fail("footer byte %d: %s %d overflows", d.off, what, v)
		return 0
	}
	return int64(v)
}

func (d *decoder) uint32(what string) uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 4 {
		d.fail("footer byte %d: truncated %s", d.off, what)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

// addNoOverflow returns a+b for non-negative a, b, or false on overflow.
func addNoOverflow(a, b int64) (int64, bool) {
	if b > math.MaxInt64-a {
		return 0, false
	}
	return a + b, true
}

// DecodeFooter decodes a footer and checks every structural rule of the
// format against dataLen (the byte length of the object's data section).
// It never trusts a count before checking it against the bytes left, so
// hostile input cannot make it allocate more than a small multiple of
// len(b).
func DecodeFooter(b []byte, dataLen int64) (*Footer, error) {
	d := &decoder{b: b}
	n := d.uvarint("stream count")
	// Each stream record takes at least 15 bytes.
	if d.err == nil && n > uint64(len(b)/15) {
		d.fail("stream count %d too large for a %d-byte footer", n, len(b))
	}
	f := &Footer{streams: make([]streamIndex, 0, n)}
	var pos int64
	for i := uint64(0); i < n && d.err == nil; i++ {
		var s streamIndex
		s.StreamID = d.uvarint("stream id")
		s.First = d.int63("first offset")
		span := d.int63("offset span")
		s.Length = d.int63("length")
		s.CRC = d.uint32("range CRC")
		s.FirstTimestamp = d.varint("first timestamp")
		s.MaxTimestamp = d.varint("max timestamp")
		batches := d.uvarint("batch count")
		idx := d.uvarint("index count")
		if d.err != nil {
			break
		}
		var ok bool
		// Next = First+span+1 must fit too.
		if next, ok := addNoOverflow(s.First, span); ok && next < math.MaxInt64 {
			s.Next = next + 1
		} else {
			d.fail("stream %d: last offset overflows", s.StreamID)
			break
		}
		if i > 0 && s.StreamID <= f.streams[i-1].StreamID {
			d.fail("stream ids not ascending: %d after %d", s.StreamID, f.streams[i-1].StreamID)
			break
		}
		s.Offset = pos
		if pos, ok = addNoOverflow(pos, s.Length); !ok || pos > dataLen {
			d.fail("stream %d: range [%d, +%d) beyond data length %d", s.StreamID, s.Offset, s.Length, dataLen)
			break
		}
		if batches == 0 || batches > uint64(s.Length/record.HeaderSize) {
			d.fail("stream %d: %d batches cannot fill %d bytes", s.StreamID, batches, s.Length)
			break
		}
		s.Batches = int(batches)
		// Each index entry takes at least 3 bytes.
		if idx == 0 || idx > batches || idx > uint64(len(b)-d.off)/3 {
			d.fail("stream %d: index count %d (batches %d)", s.StreamID, idx, batches)
			break
		}
		s.index = make([]IndexEntry, 0, idx)
		prev := IndexEntry{Offset: s.First, Pos: s.Offset, MaxTimestamp: s.FirstTimestamp}
		for j := uint64(0); j < idx && d.err == nil; j++ {
			do := d.int63("index offset delta")
			dp := d.int63("index position delta")
			dt := d.varint("index timestamp delta")
			if d.err != nil {
				break
			}
			e := IndexEntry{}
			e.Offset, ok = addNoOverflow(prev.Offset, do)
			if !ok || e.Offset > s.Last() {
				d.fail("stream %d: index entry %d offset beyond last offset %d", s.StreamID, j, s.Last())
				break
			}
			e.Pos, ok = addNoOverflow(prev.Pos, dp)
			if !ok || e.Pos+record.HeaderSize > s.End() {
				d.fail("stream %d: index entry %d position beyond the range", s.StreamID, j)
				break
			}
			// Only the first entry may lie below its base (a batch whose
			// maxTimestamp is below the stream's firstTimestamp); the
			// running maximum never decreases after it.
			if (j > 0 && dt < 0) || (dt > 0 && prev.MaxTimestamp > math.MaxInt64-dt) || (dt < 0 && prev.MaxTimestamp < math.MinInt64-dt) {
				d.fail("stream %d: index entry %d timestamp decreases or overflows", s.StreamID, j)
				break
			}
			e.MaxTimestamp = prev.MaxTimestamp + dt
			if j == 0 && (do != 0 || dp != 0) {
				d.fail("stream %d: first index entry is not the first batch", s.StreamID)
				break
			}
			if j > 0 && (do == 0 || dp < record.HeaderSize) {
				d.fail("stream %d: index entry %d does not advance", s.StreamID, j)
				break
			}
			s.index = append(s.index, e)
			prev = e
		}
		if d.err == nil && prev.MaxTimestamp != s.MaxTimestamp {
			d.fail("stream %d: index max timestamp %d != stream max timestamp %d", s.StreamID, prev.MaxTimestamp, s.MaxTimestamp)
		}
		f.streams = append(f.streams, s)
	}
	if d.err == nil && pos != dataLen {
		d.fail("stream ranges cover %d bytes, data is %d", pos, dataLen)
	}
	if d.err == nil && d.off != len(b) {
		d.fail("%d trailing bytes after the footer", len(b)-d.off)
	}
	if d.err != nil {
		return nil, &CorruptionError{Pos: dataLen + int64(d.off), Reason: d.err.Error()}
	}
	return f, nil
}
