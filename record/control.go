package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Kafka transaction markers. A marker is a control batch (attributes
// transactional|control) of one record whose key is
//
//	version int16 (0) | type int16 (0 = abort, 1 = commit)
//
// and whose value is version int16 (0) | coordinator epoch int32, as Kafka
// writes it. Clients recognise it by the control attribute and never hand
// it to the application.

// Marker is the outcome a control batch records.
type Marker int8

const (
	MarkerAbort  Marker = 0
	MarkerCommit Marker = 1
)

func (m Marker) String() string {
	if m == MarkerCommit {
		return "commit"
	}
	return "abort"
}

// AppendControlBatch appends one transaction marker batch for producer
// pid/epoch at baseOffset, stamped ts (CreateTime, ms).
func AppendControlBatch(dst []byte, baseOffset, ts, pid int64, epoch int16, coordinatorEpoch int32, m Marker) []byte {
	var key [4]byte
	binary.BigEndian.PutUint16(key[2:], uint16(m))
	var value [6]byte
	binary.BigEndian.PutUint32(value[2:], uint32(coordinatorEpoch))
	start := len(dst)
	dst = AppendBatch(dst, BatchOptions{BaseOffset: baseOffset, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, CreateTime: true},
		[]Record{{Key: key[:], Value: value[:], Timestamp: ts}})
	b := dst[start:]
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(CodecNone)|attrTransactional|attrControl)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return dst
}

// ControlMarker reads the marker of a control batch (h.Control() true).
func ControlMarker(batch []byte) (Marker, error) {
	recs, err := DecodeRecords(batch, nil)
	if err != nil {
		return 0, err
	}
	if len(recs) != 1 || len(recs[0].Key) < 4 {
		return 0, fmt.Errorf("record: control batch with %d records, key of %d bytes", len(recs), len(firstKey(recs)))
	}
	switch t := int16(binary.BigEndian.Uint16(recs[0].Key[2:4])); t {
	case 0:
		return MarkerAbort, nil
	case 1:
		return MarkerCommit, nil
	default:
		return 0, fmt.Errorf("record: control record type %d is not a transaction marker", t)
	}
}

func firstKey(recs []Record) []byte {
	if len(recs) == 0 {
		return nil
	}
	return recs[0].Key
}
