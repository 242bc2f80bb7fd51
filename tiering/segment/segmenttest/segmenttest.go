// Package segmenttest builds valid Kafka RecordBatch v2 batches for tests
// and benchmarks of tiering, without depending on the server's record
// codec (storage packages do not import node/).
package segmenttest

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch returns an uncompressed RecordBatch v2 with base offset base and
// n records, each a null key and a value of valueSize bytes derived from
// its offset, all stamped ts (LogAppendTime).
func Batch(base int64, n int, valueSize int, ts int64) []byte {
	b := make([]byte, 61, 61+n*(valueSize+16))
	binary.BigEndian.PutUint64(b[0:], uint64(base))
	binary.BigEndian.PutUint32(b[12:], 0xffffffff) // partitionLeaderEpoch -1
	b[16] = 2
	binary.BigEndian.PutUint16(b[21:], 1<<3) // LogAppendTime, no compression
	binary.BigEndian.PutUint32(b[23:], uint32(n-1))
	binary.BigEndian.PutUint64(b[27:], uint64(ts))
	binary.BigEndian.PutUint64(b[35:], uint64(ts))
	binary.BigEndian.PutUint64(b[43:], ^uint64(0)) // producerId -1
	binary.BigEndian.PutUint16(b[51:], 0xffff)     // producerEpoch -1
	binary.BigEndian.PutUint32(b[53:], 0xffffffff) // baseSequence -1
	binary.BigEndian.PutUint32(b[57:], uint32(n))
	for i := range n {
		var body []byte
		body = append(body, 0)                     // attributes
		body = binary.AppendVarint(body, 0)        // timestampDelta
		body = binary.AppendVarint(body, int64(i)) // offsetDelta
		body = binary.AppendVarint(body, -1)       // null key
		body = binary.AppendVarint(body, int64(valueSize))
		for j := range valueSize {
			body = append(body, byte(base+int64(i)+int64(j)))
		}
		body = binary.AppendVarint(body, 0) // no headers
		b = binary.AppendVarint(b, int64(len(body)))
		b = append(b, body...)
	}
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// Stream returns count consecutive batches of one stream starting at
// offset first, each of recordsPer records of valueSize bytes, with
// timestamps ts, ts+1, ….
func Stream(first int64, count, recordsPer, valueSize int, ts int64) [][]byte {
	out := make([][]byte, count)
	for i := range out {
		out[i] = Batch(first+int64(i*recordsPer), recordsPer, valueSize, ts+int64(i))
	}
	return out
}
