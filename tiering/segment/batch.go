package segment

import (
	"encoding/binary"
	"fmt"
)

// RecordBatch v2 header fields this package needs (see node/record's
// package documentation for the full layout). Only the framing is read
// here; records are never decoded, tiering moves batches as opaque bytes.
const (
	batchLengthOff     = 8  // int32: bytes after this field
	batchMagicOff      = 16 // int8: 2
	batchCRCOff        = 17 // uint32: CRC-32C of [21, end)
	batchCRCStart      = 21
	batchLastDeltaOff  = 23 // int32
	batchFirstTSOff    = 27 // int64
	batchMaxTSOff      = 35 // int64
	batchHeaderMinimum = 12 // baseOffset + batchLength: enough to know the size
)

// batchInfo is what the segment index needs from one batch.
type batchInfo struct {
	baseOffset, lastOffset int64
	firstTS, maxTS         int64
}

// batchSize returns the total size of the batch starting at b (which must
// hold at least batchHeaderMinimum bytes), or an error for an impossible
// length.
func batchSize(b []byte) (int64, error) {
	n := int64(int32(binary.BigEndian.Uint32(b[batchLengthOff:]))) + 12
	if n < minBatchSize {
		return 0, fmt.Errorf("batch length %d below the minimum %d", n, minBatchSize)
	}
	return n, nil
}

// checkBatch verifies one complete batch: framing, magic, CRC-32C, and
// a non-negative offset range. It returns the fields the index needs.
func checkBatch(b []byte) (batchInfo, error) {
	if len(b) < minBatchSize {
		return batchInfo{}, fmt.Errorf("%d bytes is shorter than a batch header", len(b))
	}
	n, err := batchSize(b)
	if err != nil {
		return batchInfo{}, err
	}
	if n != int64(len(b)) {
		return batchInfo{}, fmt.Errorf("batch length field says %d bytes, have %d", n, len(b))
	}
	if m := b[batchMagicOff]; m != 2 {
		return batchInfo{}, fmt.Errorf("magic %d, want 2", m)
	}
	if got, want := binary.BigEndian.Uint32(b[batchCRCOff:]), crc32c(b[batchCRCStart:]); got != want {
		return batchInfo{}, fmt.Errorf("batch CRC %08x, computed %08x", got, want)
	}
	bi := batchInfo{
		baseOffset: int64(binary.BigEndian.Uint64(b)),
		firstTS:    int64(binary.BigEndian.Uint64(b[batchFirstTSOff:])),
		maxTS:      int64(binary.BigEndian.Uint64(b[batchMaxTSOff:])),
	}
	delta := int64(int32(binary.BigEndian.Uint32(b[batchLastDeltaOff:])))
	if bi.baseOffset < 0 || delta < 0 || bi.baseOffset > 1<<62 {
		return batchInfo{}, fmt.Errorf("base offset %d, last offset delta %d", bi.baseOffset, delta)
	}
	bi.lastOffset = bi.baseOffset + delta
	return bi, nil
}
