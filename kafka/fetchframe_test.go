package kafka

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/record"
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
			pieces, plain := fetchFrame(nil, r, resp, nil)
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

// TestFetchFrameWritesPartsWhereTheyLie: a partition whose batches lie in
// several pieces (history from the block cache, fetchReply) is framed as
// if its RecordBatches were them joined, at every fetch version, with the
// pieces themselves in the frame (not copied), and the response left as
// it was; below spliceMin the pieces are copied into the plain frame.
func TestFetchFrameWritesPartsWhereTheyLie(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	blob := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for v := int16(4); v <= 12; v++ {
		for _, sizes := range [][]int{{3 << 20, 5000, 2 << 20}, {100, 200}, {spliceMin, 1}} {
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(v)
			tp := kmsg.NewFetchResponseTopic()
			tp.Topic = "history"
			p := kmsg.NewFetchResponseTopicPartition()
			p.HighWatermark, p.LastStableOffset = 77, 77
			var parts [][]byte
			for _, n := range sizes {
				parts = append(parts, blob(n))
			}
			small := kmsg.NewFetchResponseTopicPartition()
			small.Partition = 1
			small.RecordBatches = blob(10)
			p.RecordBatches = parts[0] // the stand-in fetchPartition leaves
			tp.Partitions = append(tp.Partitions, small, p)
			resp.Topics = append(resp.Topics, tp)
			r := request{key: kmsg.Fetch.Int16(), version: v, corr: 9}

			resp.Topics[0].Partitions[1].RecordBatches = bytes.Join(parts, nil)
			want := encodeResponse(nil, r, resp)
			resp.Topics[0].Partitions[1].RecordBatches = parts[0]

			pieces, plain := fetchFrame(nil, r, resp, map[[2]int][][]byte{{0, 1}: parts})
			got := plain
			if pieces != nil {
				got = bytes.Join(pieces, nil)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("v%d parts %v: framed %d bytes differ from the plain %d", v, sizes, len(got), len(want))
			}
			total := 0
			for _, n := range sizes {
				total += n
			}
			if (pieces != nil) != (total >= spliceMin) {
				t.Fatalf("v%d parts %v: spliced %v", v, sizes, pieces != nil)
			}
			for _, part := range parts {
				if pieces == nil {
					break
				}
				found := false
				for _, pc := range pieces {
					found = found || (len(pc) == len(part) && &pc[0] == &part[0])
				}
				if !found {
					t.Fatalf("v%d parts %v: a part of %d bytes was copied, not written where it lies", v, sizes, len(part))
				}
			}
			if got := resp.Topics[0].Partitions[1].RecordBatches; len(got) != len(parts[0]) || &got[0] != &parts[0][0] {
				t.Fatalf("v%d: the stand-in record batches not restored", v)
			}
		}
	}
}

// TestCutAtPieces: read_committed's cut at the last stable offset works
// across the pieces a page of history lies in: whole batches before the
// offset are kept, pieces after it dropped, and a piece cut inside.
func TestCutAtPieces(t *testing.T) {
	batch := func(base int64, n int) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i].Value = []byte("v")
		}
		return record.AppendBatch(nil, record.BatchOptions{BaseOffset: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	}
	// Batches [0,3) [3,5) | [5,9) | [9,10) [10,12)
	p0 := append(batch(0, 3), batch(3, 2)...)
	p1 := batch(5, 4)
	p2 := append(batch(9, 1), batch(10, 2)...)
	pieces := [][]byte{p0, p1, p2}
	for _, tc := range []struct {
		end  int64
		want []int // bytes kept of each piece
	}{
		{0, nil},
		{3, []int{len(batch(0, 3))}},
		{5, []int{len(p0)}},
		{6, []int{len(p0), len(p1)}}, // a batch starting before the offset stays whole
		{9, []int{len(p0), len(p1)}},
		{10, []int{len(p0), len(p1), len(batch(9, 1))}},
		{12, []int{len(p0), len(p1), len(p2)}},
	} {
		got := cutAt(pieces, tc.end)
		var sizes []int
		for _, p := range got {
			sizes = append(sizes, len(p))
		}
		if fmt.Sprint(sizes) != fmt.Sprint(tc.want) {
			t.Errorf("cut at %d: pieces of %v bytes, want %v", tc.end, sizes, tc.want)
		}
		if len(pieces[0]) != len(p0) || len(pieces) != 3 {
			t.Fatalf("cut at %d changed its input", tc.end)
		}
	}
}
