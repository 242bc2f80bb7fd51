package stream

import (
	"encoding/binary"
	"fmt"
)

// A WAL entry of the stream service. It carries, next to the batch, the
// stream-level facts that must survive a restart atomically with it: which
// idempotent producer wrote it, the Durable Streams writer sequence, and
// whether it closed the stream. Replaying entries rebuilds all of that, so
// producer state never costs an etcd write per append.
//
//	+-------------+-------------------+-----------+
//	| version (1) | stream id (8, BE) | flags (1) |
//	+-------------+-------------------+-----------+
//	| if flagProducer:  uvarint len, producer id, uvarint epoch, uvarint seq |
//	| if flagWriterSeq: uvarint len, writer seq                             |
//	| unless flagNoBatch: Kafka RecordBatch v2 (rest of the entry)          |
//
// These constants are part of the on-disk format; never change their values.
const (
	entryVersion = 2

	flagProducer  = 1 << 0
	flagWriterSeq = 1 << 1
	flagClose     = 1 << 2
	flagNoBatch   = 1 << 3
	// flagRecordSeq: the producer uses Kafka's per-record sequences
	// (Producer.PerRecord); seq is the batch's first record's.
	flagRecordSeq = 1 << 4

	entryFixedSize = 10
	maxEntryString = 1 << 12
)

// entry is a decoded WAL entry. Byte slices alias the decoded buffer.
type entry struct {
	streamID  uint64
	flags     byte
	producer  Producer
	writerSeq string
	batch     []byte
}

func (e *entry) hasBatch() bool { return e.flags&flagNoBatch == 0 }

// appendEntryHeader appends everything before the batch.
func appendEntryHeader(dst []byte, streamID uint64, p *Producer, writerSeq string, closeStream, noBatch bool) []byte {
	var flags byte
	if p != nil {
		flags |= flagProducer
		if p.PerRecord {
			flags |= flagRecordSeq
		}
	}
	if writerSeq != "" {
		flags |= flagWriterSeq
	}
	if closeStream {
		flags |= flagClose
	}
	if noBatch {
		flags |= flagNoBatch
	}
	dst = append(dst, entryVersion)
	dst = binary.BigEndian.AppendUint64(dst, streamID)
	dst = append(dst, flags)
	if p != nil {
		dst = binary.AppendUvarint(dst, uint64(len(p.ID)))
		dst = append(dst, p.ID...)
		dst = binary.AppendUvarint(dst, p.Epoch)
		dst = binary.AppendUvarint(dst, p.Seq)
	}
	if writerSeq != "" {
		dst = binary.AppendUvarint(dst, uint64(len(writerSeq)))
		dst = append(dst, writerSeq...)
	}
	return dst
}

// decodeEntry parses an entry. The WAL already verified its checksum, so an
// error here means a bug or a format mismatch, and is reported as such.
func decodeEntry(data []byte) (entry, error) {
	var e entry
	if len(data) >= replicaHeaderSize && data[0] == replicaEntryVersion {
		data = data[replicaHeaderSize:] // a follower's copy (replica.go)
	}
	if len(data) < entryFixedSize {
		return e, fmt.Errorf("short WAL entry (%d bytes)", len(data))
	}
	if data[0] != entryVersion {
		return e, fmt.Errorf("unknown WAL entry version %d", data[0])
	}
	e.streamID = binary.BigEndian.Uint64(data[1:9])
	e.flags = data[9]
	if e.flags&^(flagProducer|flagWriterSeq|flagClose|flagNoBatch|flagRecordSeq) != 0 {
		return e, fmt.Errorf("unknown WAL entry flags %#x", e.flags)
	}
	rest := data[entryFixedSize:]
	readString := func(what string) (string, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > maxEntryString || uint64(len(rest)-k) < n {
			return "", fmt.Errorf("bad %s length in WAL entry", what)
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, nil
	}
	readUvarint := func(what string) (uint64, error) {
		v, k := binary.Uvarint(rest)
		if k <= 0 {
			return 0, fmt.Errorf("bad %s in WAL entry", what)
		}
		rest = rest[k:]
		return v, nil
	}
	var err error
	if e.flags&flagProducer != 0 {
		if e.producer.ID, err = readString("producer id"); err != nil {
			return e, err
		}
		if e.producer.Epoch, err = readUvarint("producer epoch"); err != nil {
			return e, err
		}
		if e.producer.Seq, err = readUvarint("producer seq"); err != nil {
			return e, err
		}
		e.producer.PerRecord = e.flags&flagRecordSeq != 0
	}
	if e.flags&flagWriterSeq != 0 {
		if e.writerSeq, err = readString("writer seq"); err != nil {
			return e, err
		}
	}
	if e.hasBatch() {
		e.batch = rest
	} else if len(rest) != 0 {
		return e, fmt.Errorf("%d trailing bytes in a WAL entry without batch", len(rest))
	}
	return e, nil
}
