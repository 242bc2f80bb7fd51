package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
)

// Header is one record header. Kafka headers are ordered and may repeat a key,
// so they are a slice, not a map.
type Header struct {
	Key   string
	Value []byte // nil = null value, distinct from empty
}

// Record is one decoded record. Key and Value keep Kafka's distinction between
// null (nil) and empty (non-nil, length 0), because Kafka clients see it:
// a null value is a tombstone to a compacting consumer.
type Record struct {
	Offset    int64 // absolute
	Timestamp int64 // ms since epoch; for LogAppendTime batches this is the batch MaxTimestamp
	Key       []byte
	Value     []byte
	Headers   []Header
}

// BatchOptions are the batch-level fields AppendBatch writes. The stream
// service chooses them; nothing here comes from the records themselves.
type BatchOptions struct {
	// BaseOffset is the offset of the first record; record i gets
	// BaseOffset+i. It must be >= 0, or ParseHeader rejects the result.
	BaseOffset int64
	// Timestamp is the LogAppendTime of every record, in ms since the epoch.
	// Monotonicity per stream is the caller's job (the stream service,
	// docs/architecture.md).
	Timestamp int64
	// ProducerID identifies an idempotent producer; -1 (any negative value)
	// means none, and then ProducerEpoch and BaseSequence are written as -1
	// too, as Kafka does, whatever they hold. Note the zero value, 0, is a
	// valid producer id: set -1 explicitly for anonymous appends.
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// CreateTime keeps each record's own Timestamp (a CreateTime batch,
	// as a Kafka producer writes it) instead of stamping Timestamp on all.
	CreateTime bool
	// Transactional marks the batch as part of a Kafka transaction of
	// ProducerID (what a transactional producer writes).
	Transactional bool
}

// AppendBatch encodes recs as one uncompressed RecordBatch v2 with a correct
// CRC-32C and appends it to dst. Each record's Offset and Timestamp are
// ignored: record i gets offset opts.BaseOffset+i, and the batch uses
// LogAppendTime with FirstTimestamp = MaxTimestamp = opts.Timestamp, because
// HTTP appends are stamped by the owning node, not by the client.
// PartitionLeaderEpoch is written as 0, the constant epoch the Kafka facade
// reports.
//
// Zero records return dst unchanged: a batch must hold at least one record
// (ParseHeader rejects numRecords 0), so there is nothing valid to write.
//
// The output is sized exactly before writing, so with a dst of sufficient
// capacity AppendBatch does not allocate. A batch over the format's 2 GiB
// limit cannot be represented; callers bound append sizes far below that, and
// exceeding it panics as a programming error.
func AppendBatch(dst []byte, opts BatchOptions, recs []Record) []byte {
	if len(recs) == 0 {
		return dst
	}
	first, maxTS, attrs := opts.Timestamp, opts.Timestamp, uint16(CodecNone)|attrLogAppendTime
	if opts.CreateTime {
		first, maxTS, attrs = recs[0].Timestamp, recs[0].Timestamp, uint16(CodecNone)
		for i := range recs {
			maxTS = max(maxTS, recs[i].Timestamp)
		}
	}
	delta := func(i int) int64 {
		if opts.CreateTime {
			return recs[i].Timestamp - first
		}
		return 0
	}
	size := HeaderSize
	for i := range recs {
		body := recordBodySize(&recs[i], i, delta(i))
		size += varintLen(int64(body)) + body
	}
	if size-lengthOverhead > math.MaxInt32 {
		panic(fmt.Sprintf("record: batch of %d bytes exceeds the RecordBatch limit of %d", size, math.MaxInt32+lengthOverhead))
	}

	if opts.Transactional {
		attrs |= attrTransactional
	}
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+HeaderSize]
	h := dst[start:]
	producerID, producerEpoch, baseSequence := opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	if producerID < 0 {
		producerID, producerEpoch, baseSequence = -1, -1, -1
	}
	last := int32(len(recs) - 1)
	binary.BigEndian.PutUint64(h[offBaseOffset:], uint64(opts.BaseOffset))
	binary.BigEndian.PutUint32(h[offLength:], uint32(size-lengthOverhead))
	binary.BigEndian.PutUint32(h[offLeaderEpoch:], 0)
	h[offMagic] = Magic
	binary.BigEndian.PutUint16(h[offAttributes:], attrs)
	binary.BigEndian.PutUint32(h[offLastOffsetDelta:], uint32(last))
	binary.BigEndian.PutUint64(h[offFirstTimestamp:], uint64(first))
	binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(maxTS))
	binary.BigEndian.PutUint64(h[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(h[offProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(h[offBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(h[offNumRecords:], uint32(len(recs)))

	for i := range recs {
		dst = appendRecord(dst, &recs[i], i, delta(i))
	}
	binary.BigEndian.PutUint32(dst[start+offCRC:], crc32.Checksum(dst[start+offAttributes:], castagnoli))
	return dst
}

// recordBodySize is the size of record i after its length prefix, as
// appendRecord writes it.
func recordBodySize(r *Record, i int, tsDelta int64) int {
	n := 1 + varintLen(tsDelta) + varintLen(int64(i)) // attributes, timestampDelta, offsetDelta
	n += bytesFieldLen(r.Key) + bytesFieldLen(r.Value)
	n += varintLen(int64(len(r.Headers)))
	for j := range r.Headers {
		h := &r.Headers[j]
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesFieldLen(h.Value)
	}
	return n
}

func appendRecord(dst []byte, r *Record, i int, tsDelta int64) []byte {
	dst = binary.AppendVarint(dst, int64(recordBodySize(r, i, tsDelta)))
	dst = append(dst, 0) // attributes (unused)
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(i))
	dst = appendBytesField(dst, r.Key)
	dst = appendBytesField(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for j := range r.Headers {
		h := &r.Headers[j]
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytesField(dst, h.Value)
	}
	return dst
}

// appendBytesField writes a length-prefixed byte string, -1 for nil.
func appendBytesField(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func bytesFieldLen(b []byte) int {
	if b == nil {
		return 1 // varint(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the size of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}
