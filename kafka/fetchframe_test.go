package kafka

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchFrameSplicesBatches: a fetch response framed in pieces, with
// large record batches referenced where they lie, is byte for byte the
// plain frame at every fetch version we serve (flexible or not), and the
// response is left as it was; without large batches it is the plain frame.
func TestFetchFrameSplicesBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	blob := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	build := func(sizes ...int) *kmsg.FetchResponse {
		resp := kmsg.NewPtrFetchResponse()
		resp.ThrottleMillis = 7
		for ti := range 2 {
			tp := kmsg.NewFetchResponseTopic()
			tp.Topic = []string{"orders", "payments.eu"}[ti]
			for pi, n := range sizes {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition = int32(pi)
				p.HighWatermark, p.LastStableOffset, p.LogStartOffset = 1000+int64(pi), 999, 3
				at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				at.ProducerID, at.FirstOffset = 9, 10
				p.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{at}
				if n > 0 {
					p.RecordBatches = blob(n)
				}
				tp.Partitions = append(tp.Partitions, p)
			}
			resp.Topics = append(resp.Topics, tp)
		}
		return resp
	}
	for v := int16(4); v <= 12; v++ {
		for _, sizes := range [][]int{
			{spliceMin, 10, 0, 3 << 20},
			{spliceMin - 1, 100},
			{1 << 20},
		} {
			resp := build(sizes...)
			resp.SetVersion(v)
			r := request{key: kmsg.Fetch.Int16(), version: v, corr: 42}
			want := encodeResponse(nil, r, resp)
			var before [][]byte
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					before = append(before, p.RecordBatches)
				}
			}
			pieces, plain := fetchFrame(nil, r, resp)
			got := plain
			if pieces != nil {
				got = bytes.Join(pieces, nil)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("v%d sizes %v: framed %d bytes differ from the plain %d", v, sizes, len(got), len(want))
			}
			if large := sizes[0] >= spliceMin || (len(sizes) > 3 && sizes[3] >= spliceMin); large != (pieces != nil) {
				t.Errorf("v%d sizes %v: spliced %v, want %v", v, sizes, pieces != nil, large)
			}
			i := 0
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if len(p.RecordBatches) != len(before[i]) || (len(p.RecordBatches) > 0 && &p.RecordBatches[0] != &before[i][0]) {
						t.Fatalf("v%d: partition %d's record batches not restored", v, i)
					}
					i++
				}
			}
		}
	}
}
