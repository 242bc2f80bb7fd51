package segment

import (
	"fmt"

	"github.com/PicoMQ/picomq/record"
)

// Batches are RecordBatch v2 (package record holds the format). Tiering
// reads only their framing and never decodes records: it moves batches as
// opaque bytes.

// batchSize returns the total size of the batch starting at b (which must
// hold at least record.PrefixSize bytes), or an error for an impossible
// length.
func batchSize(b []byte) (int64, error) {
	n, err := record.BatchSize(b)
	return int64(n), err
}

// checkBatch verifies one complete batch, lying in one piece or split
// across several (record.ValidatePieces: framing, magic, header rules,
// CRC-32C), and that its offsets leave room to count past its last one.
// It returns the header the index needs.
func checkBatch(b [][]byte) (record.BatchHeader, error) {
	h, err := record.ValidatePieces(b)
	if err != nil {
		return h, err
	}
	if h.BaseOffset > 1<<62 || h.LastOffset() > 1<<62 {
		return h, fmt.Errorf("base offset %d, last offset delta %d", h.BaseOffset, h.LastOffsetDelta)
	}
	return h, nil
}
