package kafka

import (
	"bytes"
	"slices"
	"testing"

	"github.com/PicoMQ/picomq/kafka/share"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// shareTestBatches: offsets 0-2 plain, 3-4 transactional of producer 7,
// 5 plain.
func shareTestBatches() []byte {
	recs := func(n int) []record.Record { return make([]record.Record, n) }
	b := record.AppendBatch(nil, record.BatchOptions{BaseOffset: 0, ProducerID: -1}, recs(3))
	b = record.AppendBatch(b, record.BatchOptions{BaseOffset: 3, ProducerID: 7, Transactional: true}, recs(2))
	return record.AppendBatch(b, record.BatchOptions{BaseOffset: 5, ProducerID: -1}, recs(1))
}

func TestShareSpansSkipAborted(t *testing.T) {
	b := shareTestBatches()
	aborted := []stream.AbortedTxn{{ProducerID: 7, FirstOffset: 3, LastOffset: 5}}
	want := []share.Span{{First: 0, Last: 2}, {First: 3, Last: 4, Skip: true}, {First: 5, Last: 5}}
	if got := spans(b, aborted, true); !slices.Equal(got, want) {
		t.Fatalf("read_committed spans = %v, want %v", got, want)
	}
	want[1].Skip = false // read_uncommitted delivers aborted records, as Kafka
	if got := spans(b, aborted, false); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted spans = %v, want %v", got, want)
	}
	if got, all := cutBatches(b, 3, 4), spans(cutBatches(b, 3, 4), nil, false); len(got) == 0 || len(all) != 1 || all[0].First != 3 {
		t.Fatalf("cutBatches(3, 4) kept %v", all)
	}
}

// FuzzShareSpans: any bytes as a read's batches give spans without a
// panic, at most one per batch header the bytes could hold, and
// cutBatches returns a part of its input.
func FuzzShareSpans(f *testing.F) {
	f.Add(shareTestBatches(), int64(1), int64(4))
	f.Add([]byte{}, int64(0), int64(0))
	f.Add(shareTestBatches()[:70], int64(0), int64(9))
	f.Fuzz(func(t *testing.T, b []byte, from, to int64) {
		sp := spans(b, []stream.AbortedTxn{{ProducerID: 7, FirstOffset: 0, LastOffset: 1 << 40}}, true)
		if len(sp) > len(b)/record.HeaderSize {
			t.Fatalf("%d spans from %d bytes", len(sp), len(b))
		}
		cut := cutBatches(b, from, to)
		if len(cut) > 0 && !bytes.Contains(b, cut) {
			t.Fatalf("cutBatches returned bytes not in its input")
		}
	})
}
