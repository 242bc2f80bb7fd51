package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// HeaderSize is the size of the fixed batch header; records start here.
const HeaderSize = 61

// Magic is the only batch format version this package reads or writes.
const Magic = 2

// Byte positions of header fields. Everything before offAttributes is outside
// the CRC.
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// lengthOverhead is what batchLength does not count: the base offset and
	// the length field itself.
	lengthOverhead = offLeaderEpoch
)

// Attribute bits.
const (
	attrCodecMask      = 0x07
	attrLogAppendTime  = 0x08
	attrTransactional  = 0x10
	attrControl        = 0x20
	minRecordSize      = 7 // length, attributes, tsDelta, offDelta, keyLen, valLen, hdrCount: one byte each
	minRecordBodySize  = minRecordSize - 1
	minHeaderFieldSize = 2 // keyLen + valLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec is the compression of a batch's records, from attribute bits 0-2.
type Codec int8

// The codecs Kafka defines. Values 5-7 are unassigned and rejected.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// BatchHeader is the fixed 61-byte header of a batch, decoded. It carries
// everything a broker needs without touching the records: offsets to assign,
// producer identity for idempotence, the codec to store verbatim.
type BatchHeader struct {
	BaseOffset           int64
	Length               int32 // bytes after the Length field: Size()-12
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Codec returns the compression codec of the records.
func (h BatchHeader) Codec() Codec { return Codec(h.Attributes & attrCodecMask) }

// LogAppendTime reports whether record timestamps were assigned by the broker,
// in which case every record's timestamp is MaxTimestamp and the per-record
// deltas are meaningless.
func (h BatchHeader) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// Transactional reports whether the batch belongs to a transaction; readers in
// read_committed mode must hold it back until the transaction's marker.
func (h BatchHeader) Transactional() bool { return h.Attributes&attrTransactional != 0 }

// Control reports whether the batch holds a transaction marker rather than
// user records. Clients must never produce one; the produce path should reject
// it.
func (h BatchHeader) Control() bool { return h.Attributes&attrControl != 0 }

// LastOffset is the offset of the last record. ParseHeader guarantees it does
// not overflow.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the whole batch's size in bytes, header included.
func (h BatchHeader) Size() int { return lengthOverhead + int(h.Length) }

// Dense reports whether the batch holds one record per offset of its span,
// at least one: the shape of every batch a producer writes (Kafka refuses
// others on produce). Only compaction makes batches that are not dense.
func (h BatchHeader) Dense() bool { return h.NumRecords >= 1 && h.LastOffsetDelta == h.NumRecords-1 }

// ParseHeader decodes the fixed header at the start of b and checks that it is
// self-consistent. It looks at nothing past HeaderSize, so it is the cheap
// first look a reader takes at stored data; Validate adds the size and CRC
// checks that need the whole batch.
//
// Rules, each reported as a *Error:
//   - at least HeaderSize bytes (ErrTruncated); magic 2 (ErrBadMagic, checked
//     first so an old-format message set is named as such even when short)
//   - codec 0-4 (ErrUnsupportedCodec)
//   - batchLength covers at least the header; numRecords >= 0 and
//     lastOffsetDelta >= max(numRecords-1, 0): a compacted batch keeps its
//     offset span with fewer records, or none (Kafka's cleaner does the
//     same). Produced batches must also be Dense, which the produce paths
//     check
//   - baseOffset >= 0 and baseOffset+lastOffsetDelta does not overflow
//   - an uncompressed batch is long enough to hold numRecords minimal records
//   - a transactional batch has a producer id, as Kafka requires
//
// Those are the rules every batch must meet wherever it comes from. Rules
// about who may write what (clients must not send control batches, the
// sequence numbers an idempotent producer must use) belong to the produce
// path, which sees the header this returns.
func ParseHeader(b []byte) (BatchHeader, error) {
	if len(b) > offMagic && int8(b[offMagic]) != Magic {
		return BatchHeader{}, headerError(ErrBadMagic, offMagic,
			fmt.Sprintf("magic %d, want %d", int8(b[offMagic]), Magic))
	}
	if len(b) < HeaderSize {
		return BatchHeader{}, headerError(ErrTruncated, len(b),
			fmt.Sprintf("batch header needs %d bytes, have %d", HeaderSize, len(b)))
	}
	h := BatchHeader{
		BaseOffset:           int64(binary.BigEndian.Uint64(b[offBaseOffset:])),
		Length:               int32(binary.BigEndian.Uint32(b[offLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                int8(b[offMagic]),
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:       int64(binary.BigEndian.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		NumRecords:           int32(binary.BigEndian.Uint32(b[offNumRecords:])),
	}
	if c := h.Codec(); c > CodecZstd {
		return h, headerError(ErrUnsupportedCodec, offAttributes,
			fmt.Sprintf("attributes %#04x name codec %d", uint16(h.Attributes), int8(c)))
	}
	if h.Length < HeaderSize-lengthOverhead {
		return h, headerError(ErrCorrupt, offLength,
			fmt.Sprintf("batch length %d is shorter than the %d-byte header", h.Length, HeaderSize-lengthOverhead))
	}
	if h.NumRecords < 0 {
		return h, headerError(ErrCorrupt, offNumRecords,
			fmt.Sprintf("record count %d, want at least 0", h.NumRecords))
	}
	if h.LastOffsetDelta < 0 || h.LastOffsetDelta < h.NumRecords-1 {
		return h, headerError(ErrCorrupt, offLastOffsetDelta,
			fmt.Sprintf("last offset delta %d cannot hold %d records", h.LastOffsetDelta, h.NumRecords))
	}
	if h.BaseOffset < 0 || h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta) {
		return h, headerError(ErrCorrupt, offBaseOffset,
			fmt.Sprintf("base offset %d with last offset delta %d is out of range", h.BaseOffset, h.LastOffsetDelta))
	}
	if h.Codec() == CodecNone {
		if body := int64(h.Length) - (HeaderSize - lengthOverhead); int64(h.NumRecords)*minRecordSize > body {
			return h, headerError(ErrCorrupt, offNumRecords,
				fmt.Sprintf("%d records cannot fit in %d bytes", h.NumRecords, body))
		}
	}
	if h.Transactional() && h.ProducerID < 0 {
		return h, headerError(ErrCorrupt, offProducerID,
			fmt.Sprintf("transactional batch has producer id %d", h.ProducerID))
	}
	return h, nil
}

// Validate checks that b is exactly one complete, intact batch: a sane header
// (see ParseHeader), len(b) == Size(), and a CRC-32C that matches bytes
// [21, end). It does not decompress or parse records, so it costs one CRC pass
// and is what the produce path runs before storing a client's batch verbatim.
func Validate(b []byte) (BatchHeader, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if size := h.Size(); len(b) != size {
		if len(b) < size {
			return h, headerError(ErrTruncated, len(b),
				fmt.Sprintf("batch length says %d bytes, have %d", size, len(b)))
		}
		return h, headerError(ErrCorrupt, size,
			fmt.Sprintf("%d bytes after the %d-byte batch", len(b)-size, size))
	}
	if crc := crc32.Checksum(b[offAttributes:], castagnoli); crc != h.CRC {
		return h, headerError(ErrBadCRC, offCRC,
			fmt.Sprintf("stored %#08x, computed %#08x", h.CRC, crc))
	}
	return h, nil
}

// SplitBatches walks b, a concatenation of batches such as the records of one
// partition in a Kafka produce request, and calls fn with each batch's bytes
// (a sub-slice of b) and header.
//
// Every batch is validated before fn sees any of them: a produce request is
// accepted or rejected as a whole, so a bad third batch must not leave the
// first two appended. A trailing partial batch is an error (ErrTruncated),
// not something to skip: fetch responses may end in one, produce payloads may
// not. An empty b holds no batches and is not an error; whether an empty
// produce is acceptable is the caller's decision.
//
// Errors from validation are *Error with Batch set and Offset counted from the
// start of b. An error returned by fn stops the walk and is returned as is.
func SplitBatches(b []byte, fn func(batch []byte, h BatchHeader) error) error {
	for pos, i := 0, 0; pos < len(b); i++ {
		h, err := Validate(b[pos:min(len(b), pos+batchSpan(b[pos:]))])
		if err != nil {
			return inBatch(err, i, pos)
		}
		pos += h.Size()
	}
	for pos := 0; pos < len(b); {
		// Already validated: only the length is needed to find the next batch.
		size := batchSpan(b[pos:])
		h, _ := ParseHeader(b[pos:])
		if err := fn(b[pos:pos+size:pos+size], h); err != nil {
			return err
		}
		pos += size
	}
	return nil
}

// inBatch places a validation error of the i-th batch, which starts pos
// bytes into the caller's buffer, in that buffer.
func inBatch(err error, i, pos int) error {
	if e, ok := err.(*Error); ok {
		e.Batch = i
		if e.Offset >= 0 {
			e.Offset += pos
		}
	}
	return err
}

// WalkBatches calls fn with each batch of b and its header, like
// SplitBatches, but checks only the framing (a sane header, the batch
// inside b), not the CRC: it is for bytes a reader already verified on
// their way in (a stored object's batches, checked by the segment reader;
// a WAL entry, checked by its record CRC), where a second CRC pass over
// every byte served would find nothing new.
func WalkBatches(b []byte, fn func(batch []byte, h BatchHeader) error) error {
	for pos, i := 0, 0; pos < len(b); i++ {
		h, err := ParseHeader(b[pos:])
		if err == nil && h.Size() > len(b)-pos {
			err = headerError(ErrTruncated, len(b)-pos, fmt.Sprintf("batch length says %d bytes, have %d", h.Size(), len(b)-pos))
		}
		if err != nil {
			return inBatch(err, i, pos)
		}
		size := h.Size()
		if err := fn(b[pos:pos+size:pos+size], h); err != nil {
			return err
		}
		pos += size
	}
	return nil
}

// PrefixSize is how many bytes at the start of a batch tell its size: the
// base offset and the length field.
const PrefixSize = lengthOverhead

// BatchSize returns the size in bytes, header included, that the batch
// starting at b claims, reading only its first PrefixSize bytes (b must hold
// them; a shorter slice is a caller bug and panics). A length shorter than
// the header is an *Error (ErrCorrupt). Readers of stored batches use it to
// learn how much to fetch before Validate checks the whole batch.
func BatchSize(b []byte) (int, error) {
	length := int32(binary.BigEndian.Uint32(b[offLength:]))
	if length < HeaderSize-lengthOverhead {
		return 0, headerError(ErrCorrupt, offLength,
			fmt.Sprintf("batch length %d is shorter than the %d-byte header", length, HeaderSize-lengthOverhead))
	}
	return lengthOverhead + int(length), nil
}

// batchSpan returns how many bytes the batch at the start of b claims to
// occupy, or len(b) when the length field is missing or implausible, so that
// Validate then reports the real problem with the header.
func batchSpan(b []byte) int {
	if len(b) < HeaderSize {
		return len(b)
	}
	n, err := BatchSize(b)
	if err != nil {
		return len(b)
	}
	return n
}

// SetBaseOffset writes off into the batch's base offset. The field sits before
// the CRC'd region, so a broker can assign offsets to a client's batch, or
// rebase a stored one for a fetch, without rechecksumming. batch must hold at
// least the 8-byte field; a shorter slice is a caller bug and panics.
func SetBaseOffset(batch []byte, off int64) {
	binary.BigEndian.PutUint64(batch[offBaseOffset:offBaseOffset+8], uint64(off))
}

// SetPartitionLeaderEpoch writes the leader epoch that Kafka fetch responses
// carry per batch (clients use it to detect log truncation). Like the base
// offset it is outside the CRC. batch must hold at least HeaderSize bytes.
func SetPartitionLeaderEpoch(batch []byte, epoch int32) {
	binary.BigEndian.PutUint32(batch[offLeaderEpoch:offLeaderEpoch+4], uint32(epoch))
}

// SetLogAppendTime turns a batch's timestamps into the broker's log
// append time, as a Kafka broker does for a topic with
// message.timestamp.type=LogAppendTime: the timestamp-type attribute bit
// is set, maxTimestamp becomes ts (every record's timestamp is then
// maxTimestamp), and the CRC is recomputed over the rewritten region.
// Nothing else changes (firstTimestamp and the records stay as sent).
// batch must be one whole, valid batch.
func SetLogAppendTime(batch []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(batch[offAttributes:])
	binary.BigEndian.PutUint16(batch[offAttributes:], attrs|attrLogAppendTime)
	binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[offAttributes:], castagnoli))
}
