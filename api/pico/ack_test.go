package pico

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
)

// TestAppendAckJSON: the hand-written ack body is byte for byte what
// encoding/json writes for appendAck, with and without a producer,
// duplicate flag and negative (unknown) offsets.
func TestAppendAckJSON(t *testing.T) {
	for _, c := range []struct {
		ack      stream.AppendResult
		count    int
		producer bool
	}{
		{stream.AppendResult{FirstOffset: 0, NextOffset: 1, Timestamp: 1764600000000}, 1, false},
		{stream.AppendResult{FirstOffset: 1 << 40, NextOffset: 1<<40 + 100, Timestamp: -5}, 100, false},
		{stream.AppendResult{FirstOffset: 7, NextOffset: 8, Timestamp: 3, ProducerEpoch: 2, ProducerSeq: 1<<64 - 1}, 1, true},
		{stream.AppendResult{FirstOffset: -1, NextOffset: -1, Duplicate: true, ProducerEpoch: 0, ProducerSeq: 9}, 0, true},
		{stream.AppendResult{FirstOffset: 3, NextOffset: 3, Duplicate: true, Closed: true}, 0, false},
	} {
		out := appendAck{Offset: c.ack.FirstOffset, NextOffset: c.ack.NextOffset, Timestamp: c.ack.Timestamp, Count: c.count, Duplicate: c.ack.Duplicate}
		if c.producer {
			ep, sq := c.ack.ProducerEpoch, c.ack.ProducerSeq
			out.ProducerEpoch, out.ProducerSeq = &ep, &sq
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(out); err != nil {
			t.Fatal(err)
		}
		if got := appendAckJSON(nil, c.ack, c.count, c.producer); string(got) != want.String() {
			t.Errorf("%+v: got %s want %s", c, got, want.Bytes())
		}
	}
}
