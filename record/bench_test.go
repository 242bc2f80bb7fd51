package record

import "testing"

// The benchmark shape from the package brief: 100 records of 100 bytes, the
// size of a typical HTTP JSON batch append.
func benchRecords() []Record { return valueRecords(100, 100) }

func BenchmarkAppendBatch(b *testing.B) {
	recs := benchRecords()
	opts := BatchOptions{BaseOffset: 1000, Timestamp: 1_700_000_000_000, ProducerID: -1}
	buf := AppendBatch(nil, opts, recs)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendBatch(buf[:0], opts, recs)
	}
}

func BenchmarkDecodeRecords(b *testing.B) {
	headers := benchRecords()
	for i := range headers {
		headers[i].Key = []byte("order-1042")
		headers[i].Headers = []Header{{Key: "content-type", Value: []byte("application/json")}, {Key: "trace", Value: []byte("abc")}}
	}
	cases := []struct {
		name  string
		batch []byte
	}{
		{"none", AppendBatch(nil, BatchOptions{ProducerID: -1}, benchRecords())},
		{"none+headers", AppendBatch(nil, BatchOptions{ProducerID: -1}, headers)},
	}
	for _, c := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		cases = append(cases, struct {
			name  string
			batch []byte
		}{c.String(), buildKmsg(b, kbatch{codec: c, producerID: -1, recs: toKmsg(benchRecords(), nil)})})
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			dst := mustDecode(b, tc.batch)
			b.SetBytes(int64(len(tc.batch)))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = DecodeRecords(tc.batch, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidate(b *testing.B) {
	batch := AppendBatch(nil, BatchOptions{ProducerID: -1}, valueRecords(1000, 1000)) // ~1 MB, Kafka's default max
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Validate(batch); err != nil {
			b.Fatal(err)
		}
	}
}
