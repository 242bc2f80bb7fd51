// Package record reads and writes Kafka RecordBatch v2 ("magic 2"), the one
// storage format of every PicoMQ stream.
//
// Streams keep records in exactly the bytes a Kafka broker would keep, so the
// Kafka facade can answer a fetch with stored bytes after patching the base
// offset, and batches that Kafka producers compressed are stored as they came.
// The HTTP facades are the other side of the same coin: appends are encoded
// here (AppendBatch, uncompressed, LogAppendTime) and reads decode here
// (DecodeRecords, decompressing when a Kafka producer compressed the batch).
//
// # Batch layout
//
// All fixed-width integers are big-endian. The CRC-32C (Castagnoli) covers
// bytes 21 to the end; the fields before it may be rewritten in place without
// touching the checksum, which is how a broker assigns offsets.
//
//	offset size field                 CRC  notes
//	------ ---- --------------------- ---  ------------------------------------
//	     0    8 baseOffset            no   offset of the first record; SetBaseOffset
//	     8    4 batchLength           no   bytes after this field (= total - 12)
//	    12    4 partitionLeaderEpoch  no   SetPartitionLeaderEpoch
//	    16    1 magic                 no   always 2
//	    17    4 crc                   no   CRC-32C of bytes [21, end)
//	    21    2 attributes            yes  see below
//	    23    4 lastOffsetDelta       yes  numRecords-1
//	    27    8 firstTimestamp        yes  ms; record timestamps are deltas from it
//	    35    8 maxTimestamp          yes  ms; the timestamp of every record under LogAppendTime
//	    43    8 producerId            yes  -1 = not idempotent
//	    51    2 producerEpoch         yes
//	    53    4 baseSequence          yes  sequence of the first record
//	    57    4 numRecords            yes
//	    61    … records               yes  one compressed blob when codec != none
//
//	attributes (int16):
//	  bit   15..7           6             5            4           3       2..0
//	      +--------+-----------------+---------+---------------+--------+-------+
//	      | unused | deleteHorizonMs | control | transactional | tsType | codec |
//	      +--------+-----------------+---------+---------------+--------+-------+
//	  codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
//	  tsType: 0 CreateTime (producer clock), 1 LogAppendTime (broker clock)
//	  deleteHorizonMs: set by Kafka's log cleaner (KIP-534); PicoMQ's compactor
//	    never sets it (tombstones age by their own timestamp, docs/storage.md)
//
// Records follow the header back to back (after decompression, when the
// batch is compressed). Varints use zigzag encoding, as protobuf's sint32 and
// sint64 do; "varint" fields are 32-bit, "varlong" fields 64-bit:
//
//	field           encoding  notes
//	--------------  --------  ----------------------------------------------
//	length          varint    bytes after this field
//	attributes      int8      unused; written as 0
//	timestampDelta  varlong   ms after firstTimestamp
//	offsetDelta     varint    PicoMQ requires the record's index in the batch
//	keyLength       varint    -1 = null key
//	key             bytes
//	valueLength     varint    -1 = null value
//	value           bytes
//	headerCount     varint
//	headers         repeated headerCount times:
//	  keyLength     varint    >= 0: a header key is never null
//	  key           bytes     UTF-8 by convention, not checked
//	  valueLength   varint    -1 = null value
//	  value         bytes
//
// # Errors
//
// Every error returned for bad input is a *Error whose Kind is one of
// ErrTruncated, ErrBadMagic, ErrBadCRC, ErrCorrupt, ErrUnsupportedCodec or
// ErrTooLarge, and every one of them matches errors.Is(err, ErrInvalid), so a
// frontend can map the whole class to HTTP 400 or Kafka CORRUPT_MESSAGE with
// one check and still log which rule was broken, and where.
package record
