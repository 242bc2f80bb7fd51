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
// A partition listed in parts (topic and partition index) has its batches
// there, in several pieces, instead of in RecordBatches. It returns nil
// pieces when nothing is worth splicing (dst then holds the plain frame).
//
// The response is encoded with a random 16-byte marker in place of each
// large RecordBatches; the encoder writes the marker after its length
// prefix, which is then replaced by the real length's.
func fetchFrame(dst []byte, r request, resp *kmsg.FetchResponse, parts map[[2]int][][]byte) (net.Buffers, []byte) {
	type splice struct {
		p      *kmsg.FetchResponseTopicPartition
		orig   []byte   // RecordBatches as the handler left it
		data   [][]byte // the batches, in pieces
		size   int
		marker [16]byte
	}
	var splices, joined []splice
	defer func() {
		for _, sp := range joined {
			sp.p.RecordBatches = sp.orig
		}
	}()
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			p := &resp.Topics[ti].Partitions[pi]
			sp := splice{p: p, orig: p.RecordBatches, data: parts[[2]int{ti, pi}]}
			if sp.data == nil {
				sp.data = [][]byte{p.RecordBatches}
			}
			for _, d := range sp.data {
				sp.size += len(d)
			}
			if sp.size < spliceMin {
				if len(sp.data) > 1 { // small: copied into the frame
					p.RecordBatches = bytes.Join(sp.data, nil)
					joined = append(joined, sp)
				}
				continue
			}
			_, _ = rand.Read(sp.marker[:])
			splices = append(splices, sp)
		}
	}
	// plain is the frame with every partition's batches copied in.
	plain := func(dst []byte) []byte {
		for _, sp := range splices {
			sp.p.RecordBatches = bytes.Join(sp.data, nil)
		}
		dst = encodeResponse(dst, r, resp)
		for _, sp := range splices {
			sp.p.RecordBatches = sp.orig
		}
		return dst
	}
	if len(splices) == 0 {
		return nil, encodeResponse(dst, r, resp)
	}
	for i := range splices {
		splices[i].p.RecordBatches = splices[i].marker[:]
	}
	dst = encodeResponse(dst, r, resp)
	for _, sp := range splices {
		sp.p.RecordBatches = sp.orig
	}
	flexible := resp.IsFlexible()
	pieces := make(net.Buffers, 0, 3*len(splices)+1)
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
			return nil, plain(dst[:0])
		}
		at += pos
		start := len(prefixes)
		if flexible {
			prefixes = binary.AppendUvarint(prefixes, uint64(sp.size)+1)
		} else {
			prefixes = binary.BigEndian.AppendUint32(prefixes, uint32(sp.size))
		}
		head := dst[pos : at-len(old)]
		pieces = append(pieces, head, prefixes[start:len(prefixes):len(prefixes)])
		pieces = append(pieces, sp.data...)
		size += len(head) + len(prefixes) - start + sp.size
		pos = at + len(sp.marker)
	}
	pieces = append(pieces, dst[pos:])
	size += len(dst) - pos
	binary.BigEndian.PutUint32(dst, uint32(size-4))
	return pieces, dst
}
