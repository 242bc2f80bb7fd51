package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The replication wire format: what an owner sends its followers
// (replicate.go) and what a new owner pulls from them at a takeover
// (replica.go). Binary, length-prefixed, versioned by its first byte; the
// transport (node/replication) carries it as an HTTP body.
//
//	request:  version (1) | uvarint frames | frame...
//	frame:    stream id (8, BE) | uvarint len, name | varint epoch |
//	          varint uploaded | varint from | uvarint entries |
//	          (uvarint len, WAL entry (entry.go))...
//	results:  version (1) | uvarint n | (stream id (8) | status (1) |
//	          varint epoch | varint next)...

// ReplicaFrame is one stream's part of a replication request: the owner's
// WAL entries of the stream, in order, from offset From on.
type ReplicaFrame struct {
	StreamID uint64
	Name     string
	// Epoch is the sender's ownership epoch: a follower refuses frames of
	// an epoch lower than the highest it has seen for the stream.
	Epoch int64
	// Uploaded: offsets below are committed in object storage, so the
	// follower may release its copy of them.
	Uploaded int64
	// From is the owner's next offset before the first entry: where the
	// follower's copy must end for the entries to follow it.
	From    int64
	Entries [][]byte
}

// Replica result statuses.
const (
	// ReplicaOK: the entries are fsynced on the follower; Next is the
	// end of its copy.
	ReplicaOK byte = 1
	// ReplicaNeed: the follower's copy ends at Next (-1: it has none),
	// not at From; the owner resends from there.
	ReplicaNeed byte = 2
	// ReplicaFenced: the follower has seen a higher epoch (Epoch).
	ReplicaFenced byte = 3
)

// ReplicaResult is a follower's answer to one frame.
type ReplicaResult struct {
	StreamID uint64
	Status   byte
	Epoch    int64
	Next     int64
}

const (
	replWireVersion = 1
	// Bounds on what a decoder accepts, so hostile bytes cannot make it
	// allocate much: a frame list is bounded by the body size the
	// transport allows.
	maxReplicaFrames  = 1 << 16
	maxReplicaEntries = 1 << 20
	maxReplicaEntry   = 64 << 20
)

var errReplWire = errors.New("stream: malformed replication message")

// AppendReplicaFrames encodes frames.
func AppendReplicaFrames(dst []byte, frames []ReplicaFrame) []byte {
	dst = append(dst, replWireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(frames)))
	for _, f := range frames {
		dst = binary.BigEndian.AppendUint64(dst, f.StreamID)
		dst = binary.AppendUvarint(dst, uint64(len(f.Name)))
		dst = append(dst, f.Name...)
		dst = binary.AppendVarint(dst, f.Epoch)
		dst = binary.AppendVarint(dst, f.Uploaded)
		dst = binary.AppendVarint(dst, f.From)
		dst = binary.AppendUvarint(dst, uint64(len(f.Entries)))
		for _, e := range f.Entries {
			dst = binary.AppendUvarint(dst, uint64(len(e)))
			dst = append(dst, e...)
		}
	}
	return dst
}

// wireReader consumes a message, remembering the first error.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errReplWire, what)
	}
}

func (r *wireReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) fixed64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *wireReader) bytes(what string, limit uint64) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if n > limit || n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) version() {
	if len(r.b) == 0 || r.b[0] != replWireVersion {
		r.fail("unknown version")
		return
	}
	r.b = r.b[1:]
}

// DecodeReplicaFrames decodes a request. Entries alias b.
func DecodeReplicaFrames(b []byte) ([]ReplicaFrame, error) {
	r := &wireReader{b: b}
	r.version()
	n := r.uvarint("frame count")
	if n > maxReplicaFrames {
		r.fail("too many frames")
	}
	var frames []ReplicaFrame
	if n <= uint64(len(r.b)) {
		frames = make([]ReplicaFrame, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		f := ReplicaFrame{StreamID: r.fixed64("stream id")}
		f.Name = string(r.bytes("name", maxEntryString))
		f.Epoch = r.varint("epoch")
		f.Uploaded = r.varint("uploaded")
		f.From = r.varint("from")
		k := r.uvarint("entry count")
		if k > maxReplicaEntries || k > uint64(len(r.b)) {
			r.fail("too many entries")
		} else {
			f.Entries = make([][]byte, 0, k)
		}
		for j := uint64(0); j < k && r.err == nil; j++ {
			e := r.bytes("entry", maxReplicaEntry)
			if r.err == nil && len(e) < entryFixedSize {
				r.fail("short entry")
			}
			f.Entries = append(f.Entries, e)
		}
		frames = append(frames, f)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return frames, nil
}

// AppendReplicaResults encodes a follower's answers.
func AppendReplicaResults(dst []byte, res []ReplicaResult) []byte {
	dst = append(dst, replWireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(res)))
	for _, x := range res {
		dst = binary.BigEndian.AppendUint64(dst, x.StreamID)
		dst = append(dst, x.Status)
		dst = binary.AppendVarint(dst, x.Epoch)
		dst = binary.AppendVarint(dst, x.Next)
	}
	return dst
}

// DecodeReplicaResults decodes a follower's answers.
func DecodeReplicaResults(b []byte) ([]ReplicaResult, error) {
	r := &wireReader{b: b}
	r.version()
	n := r.uvarint("result count")
	if n > maxReplicaFrames || n > uint64(len(r.b)) {
		r.fail("too many results")
	}
	var out []ReplicaResult
	for i := uint64(0); i < n && r.err == nil; i++ {
		x := ReplicaResult{StreamID: r.fixed64("stream id")}
		if r.err == nil {
			if len(r.b) == 0 {
				r.fail("status")
			} else {
				x.Status, r.b = r.b[0], r.b[1:]
			}
		}
		x.Epoch = r.varint("epoch")
		x.Next = r.varint("next")
		out = append(out, x)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}
