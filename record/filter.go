package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// FilterBatch appends to dst a copy of batch that holds only the records
// keep selects, and returns it with the number kept: what key compaction
// writes. The copy keeps everything a reader relies on: base offset,
// last offset delta (so the next batch still starts where it did), each
// kept record's bytes (offset and timestamp deltas included), first and
// max timestamps, attributes and producer fields. Only the codec changes:
// a rewritten batch is stored uncompressed. When keep selects every record
// the batch is appended unchanged, compressed or not; when it selects none
// the result is an empty batch of the same span (numRecords 0), which Kafka
// clients step over (KAFKA-5443).
//
// batch must be one whole valid batch (DecodeRecords' rules); keep sees the
// decoded records, which alias batch or a decompression buffer.
func FilterBatch(dst, batch []byte, keep func(r *Record) bool) ([]byte, int, error) {
	recs, err := DecodeRecords(batch, nil)
	if err != nil {
		return dst, 0, err
	}
	keepIdx := make([]bool, len(recs))
	kept := 0
	for i := range recs {
		if keep(&recs[i]) {
			keepIdx[i] = true
			kept++
		}
	}
	if kept == len(recs) {
		return append(dst, batch...), kept, nil
	}
	h, _ := ParseHeader(batch) // DecodeRecords validated it
	data := batch[HeaderSize:]
	if h.Codec() != CodecNone {
		if data, err = decompress(h.Codec(), data); err != nil {
			return dst, 0, err
		}
	}
	start := len(dst)
	dst = append(dst, batch[:HeaderSize]...)
	for i, pos := 0, 0; i < len(recs); i++ {
		length, p, st := varint32(data, pos)
		if st != varintOK {
			return dst[:start], 0, fmt.Errorf("record: filter: record %d length", i) // DecodeRecords read it
		}
		end := p + int(length)
		if keepIdx[i] {
			dst = append(dst, data[pos:end]...)
		}
		pos = end
	}
	finishBatch(dst[start:], h.Attributes&^attrCodecMask, kept)
	return dst, kept, nil
}

// AppendEmptyBatch appends a batch of no records spanning offsets [base,
// last], stamped ts: what compaction leaves in place of consecutive
// batches it emptied, so a stream's batches stay contiguous. It belongs to
// no producer and no transaction.
func AppendEmptyBatch(dst []byte, base, last, ts int64) []byte {
	start := len(dst)
	dst = slices.Grow(dst, HeaderSize)[:start+HeaderSize]
	h := dst[start:]
	clear(h)
	binary.BigEndian.PutUint64(h[offBaseOffset:], uint64(base))
	h[offMagic] = Magic
	binary.BigEndian.PutUint32(h[offLastOffsetDelta:], uint32(last-base))
	binary.BigEndian.PutUint64(h[offFirstTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(h[offProducerID:], ^uint64(0))
	binary.BigEndian.PutUint16(h[offProducerEpoch:], ^uint16(0))
	binary.BigEndian.PutUint32(h[offBaseSequence:], ^uint32(0))
	finishBatch(h, 0, 0)
	return dst
}

// finishBatch sets b's attributes, record count, length and CRC (b is one
// whole batch: header and records).
func finishBatch(b []byte, attrs int16, n int) {
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint32(b[offNumRecords:], uint32(n))
	binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-lengthOverhead))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}
