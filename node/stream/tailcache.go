package stream

import (
	"sync/atomic"

	"github.com/PicoMQ/picomq/wal"
)

// tailCache holds the record batch of each stream's latest append, so a
// live reader woken by that append reads it from memory instead of
// reading back (pread, checksum, decode) the WAL entry just written.
//
// It is safe by construction rather than by bookkeeping:
//   - An entry is keyed by the stream incarnation and the WAL position the
//     batch was written at; positions are never reused, so a hit holds the
//     very bytes the WAL has at that position (readers of the WAL chunk see
//     the same batch either way).
//   - It decides nothing about visibility: readChunks serves only batches
//     below the readable end (fdatasync'ed, and replicated where the
//     stream asks for it), whichever way it got their bytes.
//   - The bytes are a copy made at append time and never written again:
//     readers share them as they share block-cache pieces.
//
// It is bounded without any lifecycle hooks: a fixed number of slots,
// chosen by stream id, each holding at most one batch of at most
// tailCacheMaxBatch bytes (a colliding stream simply replaces it, and a
// miss reads the WAL as before). Deleted or flushed streams leave at most
// their one slot behind until it is overwritten.
type tailCache struct {
	slots [tailCacheSlots]atomic.Pointer[tailBatch]
}

// tailCacheSlots × tailCacheMaxBatch bounds the memory held: 16 MiB at
// most, and a few hundred bytes per slot for the small appends live tails
// follow. Larger batches are read from the WAL, where the pread is small
// beside the batch's own handling.
const (
	tailCacheSlots    = 1024
	tailCacheMaxBatch = 16 << 10
)

type tailBatch struct {
	streamID uint64
	pos      wal.Pos
	batch    []byte
}

// smallTailBatch is a tailBatch whose bytes are in the same allocation
// (tailBatch.batch points into buf), for batches of at most
// tailSmallBatch bytes: one 100 B record's batch is about 170.
type smallTailBatch struct {
	tailBatch
	buf [tailSmallBatch]byte
}

const tailSmallBatch = 256

func (c *tailCache) slot(streamID uint64) *atomic.Pointer[tailBatch] {
	// Fibonacci hashing: ids are sequential, spread them over the slots.
	return &c.slots[(streamID*0x9E3779B97F4A7C15)>>(64-10)]
}

// put records batch (copied) as written at pos for streamID.
func (c *tailCache) put(streamID uint64, pos wal.Pos, batch []byte) {
	if len(batch) == 0 || len(batch) > tailCacheMaxBatch {
		return
	}
	if len(batch) <= tailSmallBatch {
		// One allocation for the entry and its bytes: a live tail's
		// appends are small, and each allocation on the append path
		// costs about a microsecond when it runs cold (200 appends/s).
		sb := new(smallTailBatch)
		sb.tailBatch = tailBatch{streamID: streamID, pos: pos, batch: sb.buf[:copy(sb.buf[:], batch)]}
		c.slot(streamID).Store(&sb.tailBatch)
		return
	}
	c.slot(streamID).Store(&tailBatch{streamID: streamID, pos: pos, batch: append([]byte(nil), batch...)})
}

// get returns the batch written at pos for streamID, if it is still held.
func (c *tailCache) get(streamID uint64, pos wal.Pos) ([]byte, bool) {
	b := c.slot(streamID).Load()
	if b == nil || b.streamID != streamID || b.pos != pos {
		return nil, false
	}
	return b.batch, true
}
