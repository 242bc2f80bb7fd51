package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// spliceMin is the size from which a partition's record batches are
// written from their own memory (the block cache's, for history) instead
// of being copied into the response buffer.
const spliceMin = 64 << 10

// fetchFrame frames a fetch response like encodeResponse, but as pieces:
// each partition's record batches of spliceMin bytes or more are not
// copied into dst but referenced where they lie, so a fetch of history
// goes from the cache to the socket (one writev) with no copy of ours.
// It returns nil pieces when nothing is worth splicing (dst then holds the
// plain frame).
//
// The response is encoded with a random 16-byte marker in place of each
// large RecordBatches; the encoder writes the marker after its length
// prefix, which is then replaced by the real length's.
func fetchFrame(dst []byte, r request, resp *kmsg.FetchResponse) (net.Buffers, []byte) {
	type splice struct {
		p      *kmsg.FetchResponseTopicPartition
		data   []byte
		marker [16]byte
	}
	var splices []splice
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			p := &resp.Topics[ti].Partitions[pi]
			if len(p.RecordBatches) < spliceMin {
				continue
			}
			sp := splice{p: p, data: p.RecordBatches}
			_, _ = rand.Read(sp.marker[:])
			splices = append(splices, sp)
		}
	}
	if len(splices) == 0 {
		return nil, encodeResponse(dst, r, resp)
	}
	for i := range splices {
		splices[i].p.RecordBatches = splices[i].marker[:]
	}
	dst = encodeResponse(dst, r, resp)
	for _, sp := range splices {
		sp.p.RecordBatches = sp.data
	}
	flexible := resp.IsFlexible()
	pieces := make(net.Buffers, 0, 2*len(splices)+1)
	prefixes := make([]byte, 0, 5*len(splices))
	pos, size := 0, 0
	for _, sp := range splices {
		at := bytes.Index(dst[pos:], sp.marker[:])
		var old []byte
		if flexible { // compact bytes: uvarint(len + 1)
			old = []byte{byte(len(sp.marker) + 1)}
		} else { // bytes: int32 len
			old = binary.BigEndian.AppendUint32(nil, uint32(len(sp.marker)))
		}
		if at < len(old) || !bytes.Equal(dst[pos+at-len(old):pos+at], old) {
			// Not where the encoding puts it: send the plain frame.
			return nil, encodeResponse(dst[:0], r, resp)
		}
		at += pos
		start := len(prefixes)
		if flexible {
			prefixes = binary.AppendUvarint(prefixes, uint64(len(sp.data))+1)
		} else {
			prefixes = binary.BigEndian.AppendUint32(prefixes, uint32(len(sp.data)))
		}
		head := dst[pos : at-len(old)]
		pieces = append(pieces, head, prefixes[start:len(prefixes):len(prefixes)], sp.data)
		size += len(head) + len(prefixes) - start + len(sp.data)
		pos = at + len(sp.marker)
	}
	pieces = append(pieces, dst[pos:])
	size += len(dst) - pos
	binary.BigEndian.PutUint32(dst, uint32(size-4))
	return pieces, dst
}
