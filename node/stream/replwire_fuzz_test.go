package stream

import (
	"bytes"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// FuzzReplicaFrames: hostile bytes never panic the decoder of replication
// requests, and whatever it accepts encodes back to the same bytes.
func FuzzReplicaFrames(f *testing.F) {
	entry := appendEntryHeader(nil, 7, &Producer{ID: "p", Epoch: 1, Seq: 3}, "", false, false)
	entry = record.AppendBatch(entry, record.BatchOptions{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Value: []byte("v")}})
	f.Add(AppendReplicaFrames(nil, []ReplicaFrame{{StreamID: 7, Name: "/a", Epoch: 2, Uploaded: 4, From: 5, Entries: [][]byte{entry}}}))
	f.Add(AppendReplicaFrames(nil, []ReplicaFrame{{StreamID: 1, Name: "/b", Epoch: 1, From: 0}, {StreamID: 2, Epoch: 9, Uploaded: -1, From: 3}}))
	f.Add(AppendReplicaResults(nil, []ReplicaResult{{StreamID: 7, Status: ReplicaNeed, Epoch: 2, Next: -1}}))
	f.Add([]byte{replWireVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if frames, err := DecodeReplicaFrames(b); err == nil {
			if again := AppendReplicaFrames(nil, frames); !bytes.Equal(again, b) {
				// Varints have one shortest form; a longer one decodes
				// but does not round-trip: re-decode must agree.
				f2, err := DecodeReplicaFrames(again)
				if err != nil || len(f2) != len(frames) {
					t.Fatalf("re-encoded frames do not decode alike: %v", err)
				}
			}
		}
		if res, err := DecodeReplicaResults(b); err == nil {
			if _, err := DecodeReplicaResults(AppendReplicaResults(nil, res)); err != nil {
				t.Fatalf("re-encoded results do not decode: %v", err)
			}
		}
	})
}
