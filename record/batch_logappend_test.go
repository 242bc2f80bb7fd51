package record

import (
	"testing"
	"time"
)

// TestSetLogAppendTime: the rewritten batch validates (CRC recomputed),
// reports LogAppendTime with the broker's time, and its records keep
// their offsets and values and read back at that time.
func TestSetLogAppendTime(t *testing.T) {
	b := AppendBatch(nil, BatchOptions{BaseOffset: 7, Timestamp: 1000, CreateTime: true, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]Record{{Value: []byte("a"), Timestamp: 1000}, {Value: []byte("b"), Timestamp: 1500}})
	now := time.Now().UnixMilli()
	SetLogAppendTime(b, now)
	h, err := Validate(b)
	if err != nil {
		t.Fatalf("after SetLogAppendTime: %v", err)
	}
	if !h.LogAppendTime() || h.MaxTimestamp != now || h.FirstTimestamp != 1000 {
		t.Fatalf("header %+v", h)
	}
	recs, err := DecodeRecords(b, nil)
	if err != nil || len(recs) != 2 || string(recs[1].Value) != "b" || recs[1].Offset != 8 || recs[0].Timestamp != now || recs[1].Timestamp != now {
		t.Fatalf("records %+v, %v", recs, err)
	}
}
