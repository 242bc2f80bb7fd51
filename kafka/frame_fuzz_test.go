package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzRequestFraming: any bytes on a connection are framed and decoded or
// refused without a panic; a frame is never larger than the limit, and a
// size prefix above the limit is refused before its body is read.
func FuzzRequestFraming(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	av.ClientSoftwareName, av.ClientSoftwareVersion = "fuzz", "1"
	f.Add(fm.AppendRequest(nil, av, 1))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	topic := "t"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	f.Add(fm.AppendRequest(nil, md, 2))
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0})
	f.Add([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 16
		r := bufio.NewReader(bytes.NewReader(b))
		for i := range 8 {
			frame, err := readFrame(r, limit, nil)
			if i == 0 && len(b) >= 4 {
				if size := int32(binary.BigEndian.Uint32(b[:4])); (size > limit || size < minFrame) && err == nil {
					t.Fatalf("size prefix %d outside [%d, %d] accepted", size, minFrame, limit)
				}
			}
			if err != nil {
				return
			}
			if len(frame) > limit || len(frame) < minFrame {
				t.Fatalf("frame of %d bytes outside [%d, %d]", len(frame), minFrame, limit)
			}
			_, _ = decodeRequest(frame)
		}
	})
}
