package kafka

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestWithheldFrameOfEveryKeyCloses: on a connection past its first
// request, a request whose size prefix has arrived but whose body never
// comes is closed after FrameTimeout, whatever its key: the consumer-
// protocol and share-group keys (68, 69, 76-79, 90-92) and the
// transactional ones ride on the same per-frame bound as Produce. Other
// connections are served meanwhile.
func TestWithheldFrameOfEveryKeyCloses(t *testing.T) {
	const frameTimeout = 300 * time.Millisecond
	ts := startServer(t, Config{FrameTimeout: frameTimeout})
	keys := []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.EndTxn,
		kmsg.ConsumerGroupHeartbeat, kmsg.ConsumerGroupDescribe,
		kmsg.ShareGroupHeartbeat, kmsg.ShareGroupDescribe, kmsg.ShareFetch, kmsg.ShareAcknowledge,
		kmsg.DescribeShareGroupOffsets, kmsg.AlterShareGroupOffsets, kmsg.DeleteShareGroupOffsets}
	for _, k := range keys {
		t.Run(kmsg.NameForKey(k.Int16()), func(t *testing.T) {
			rc := ts.raw()
			av := kmsg.NewPtrApiVersionsRequest()
			av.SetVersion(3)
			rc.roundTrip(av, 1) // the connection's first request: past the login bound
			req := kmsg.RequestForKey(k.Int16())
			req.SetVersion(req.MaxVersion())
			frame := appendFrame([]byte{0, 0, 0, 0}, req, 2, "test")
			binary.BigEndian.PutUint32(frame, uint32(len(frame)-4)+64) // 64 bytes more are promised and never sent
			start := time.Now()
			if _, err := rc.c.Write(frame); err != nil {
				t.Fatal(err)
			}
			if _, _, err := rc.recv(false, 20*time.Second); err == nil {
				t.Fatal("a response to a frame whose body never came")
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("withheld frame closed after %v, FrameTimeout %v", d, frameTimeout)
			} else if d < frameTimeout/2 {
				t.Fatalf("closed after %v, before FrameTimeout %v", d, frameTimeout)
			}
			other := ts.raw()
			if r := other.roundTrip(av, 3).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
				t.Fatalf("other connection: error %d", r.ErrorCode)
			}
		})
	}
}
