// Package segment reads and writes PicoMQ's segment objects: immutable
// objects in object storage that hold Kafka RecordBatch v2 batches of one
// or many streams, followed by an index footer and a fixed trailer.
//
// One format serves both tiers (docs/storage.md): an L0 object is one node's
// flush holding the new batches of every stream that had any (so the number
// of PUTs follows bytes and time, never the number of streams), and an L1
// object is one stream's compacted segment (the same format with a single
// stream). Batches are stored byte for byte as the WAL holds them (base
// offset = the stream offset of the batch's first record), so a Kafka fetch
// can serve them as they are.
//
// # Object layout
//
//	+--------------------------------------------------------------+
//	| data: stream A's batches | stream B's batches | ...          |  streams in ascending id,
//	|       (contiguous, offset order, no gaps)                    |  each one contiguous range
//	+--------------------------------------------------------------+
//	| footer: index of streams and their batches (varints)         |  footerLen bytes
//	+--------------------------------------------------------------+
//	| trailer: 32 bytes, fixed                                     |
//	+--------------------------------------------------------------+
//
// Trailer (big-endian):
//
//	offset size field
//	     0    8 magic "PicoMQsg"
//	     8    2 version (1)
//	    10    2 flags (0; a reader rejects bits it does not know)
//	    12    4 footerLen
//	    16    8 dataLen (= byte position of the footer)
//	    24    4 CRC-32C (Castagnoli) of the footer
//	    28    4 CRC-32C of trailer bytes [0, 28)
//
// The object's size is exactly dataLen + footerLen + 32, which a reader
// checks, so a truncated or padded object is caught before any index is
// trusted.
//
// Footer (uvarint = unsigned LEB128, varint = zigzag; offsets and
// positions delta-encoded so a typical entry is a few bytes):
//
//	uvarint streamCount
//	streamCount times, in strictly ascending stream id:
//	  uvarint streamID
//	  uvarint firstOffset
//	  uvarint lastOffset - firstOffset
//	  uvarint length              bytes of this stream's range; ranges are
//	                              contiguous, so start = sum of the previous
//	                              lengths and the sum of all = dataLen
//	  4 bytes CRC-32C of the range (for whole-range readers: compaction, audits)
//	  varint  firstTimestamp      the first batch's firstTimestamp
//	  varint  maxTimestamp        max over the batches' maxTimestamp
//	  uvarint batchCount
//	  uvarint indexCount          1..batchCount
//	  indexCount times (the first entry is always the first batch):
//	    uvarint baseOffset - previous entry's (first entry: - firstOffset, = 0)
//	    uvarint position  - previous entry's (first entry: - start, = 0)
//	    varint  runningMaxTimestamp - previous entry's (first: - firstTimestamp)
//
// The batch index is sparse: an entry at least every IndexIntervalBytes of
// data (Kafka's index.interval.bytes idea), so a read at any offset costs at
// most one ranged read of about that many extra bytes, while the footer of
// an 8 MiB object stays a few KiB and arrives with the trailer in one GET.
// runningMaxTimestamp is the maximum batch maxTimestamp up to the end of
// the entry's span (the batches before the next entry), non-decreasing, so
// a time lookup is a binary search too.
//
// # Integrity
//
// The trailer CRC protects the trailer, the footer CRC the index. Every
// batch carries its own CRC-32C, which Writer checks before accepting it and
// Reader checks before returning it; Reader also checks what the batch CRC
// does not cover (the magic byte, the length, and the base offset, which
// must continue the stream exactly). Anything wrong is a *CorruptionError
// (errors.Is ErrCorrupt) naming the object and byte position; corrupt bytes
// are never returned as data.
//
// # Reading
//
// Three ways in, by what the caller knows:
//
//   - ReadStream(src, key, entry, offset, maxBytes): the registry's
//     extent.Extent is enough; reads from the start of the stream's range
//     (one GET when offset is near the start, the common catch-up case).
//   - Open(src, key, size) then Reader.ReadBatches / Reader.Cursor /
//     Reader.OffsetForTimestamp: the footer's index puts a read at any
//     offset within IndexInterval bytes of its batch (one GET for the
//     trailer and footer, one for the data).
//   - NewCursor / Reader.Cursor then Cursor.Next: a sequential reader that
//     keeps its byte position between chunks.
//
// Reads through a RangeReader that is also an Advisor (the block cache)
// announce the rest of the range they are reading after the first chunk,
// which turns on read-ahead without delaying the first batch.
//
// # Concurrency
//
// A Writer is for one goroutine. A Reader is immutable after Open and safe
// for concurrent use; its reads go through the RangeReader it was given
// (an objstore.Store, or a block cache over one).
package segment
