package stream

import (
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// TestFlushRefusesARangeItsBatchesDoNotHold: a flush whose WAL chunks do
// not hold exactly the offsets its manifest entry would claim (an index
// with a hole or an overlap) is refused instead of committed: the
// manifest would name offsets its object lacks, and readers would be moved
// past them for good.
func TestFlushRefusesARangeItsBatchesDoNotHold(t *testing.T) {
	batch := func(base int64, n int) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i].Value = []byte("v")
		}
		return record.AppendBatch(nil, record.BatchOptions{BaseOffset: base, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	}
	cases := []struct {
		name string
		u    UploadStream
		want string
	}{
		{"exact", UploadStream{First: 10, Next: 15, Batches: [][]byte{batch(10, 2), batch(12, 3)}}, ""},
		{"state only", UploadStream{First: 15, Next: 15}, ""},
		{"hole inside", UploadStream{First: 10, Next: 15, Batches: [][]byte{batch(10, 2), batch(13, 2)}}, "jump from offset 12 to 13"},
		{"starts late", UploadStream{First: 10, Next: 15, Batches: [][]byte{batch(12, 3)}}, "jump from offset 10 to 12"},
		{"ends early", UploadStream{First: 10, Next: 15, Batches: [][]byte{batch(10, 3)}}, "end at 13"},
		{"nothing for a range", UploadStream{First: 10, Next: 15}, "end at 10"},
	}
	for _, c := range cases {
		err := coversExactly(c.u)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
