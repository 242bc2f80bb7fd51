// Package segmenttest builds valid Kafka RecordBatch v2 batches for tests
// and benchmarks of tiering, with the record codec.
package segmenttest

import "github.com/PicoMQ/picomq/record"

// Batch returns an uncompressed RecordBatch v2 with base offset base and
// n records, each a null key and a value of valueSize bytes derived from
// its offset, all stamped ts (LogAppendTime).
func Batch(base int64, n int, valueSize int, ts int64) []byte {
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, valueSize)
		for j := range v {
			v[j] = byte(base + int64(i) + int64(j))
		}
		recs[i].Value = v
	}
	b := record.AppendBatch(nil, record.BatchOptions{BaseOffset: base, Timestamp: ts, ProducerID: -1}, recs)
	record.SetPartitionLeaderEpoch(b, -1) // as the committed fuzz seeds were built
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
