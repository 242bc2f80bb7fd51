package stream

import (
	"encoding/json"
	"testing"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/tiering/extent"
)

// TestChooseKeyRanges: a run takes the stream's contiguous ranges from its
// start up to the cut, across nodes' manifests, and strips exactly them
// from their manifests; other streams' ranges stay; a manifest left empty
// goes with its object; a hole stops the run.
func TestChooseKeyRanges(t *testing.T) {
	e := func(id uint64, first, next int64) metadata.ManifestStream {
		return metadata.ManifestStream{Extent: extent.Extent{StreamID: id, First: first, Next: next, Length: 100}}
	}
	m := func(node string, seq uint64, es ...metadata.ManifestStream) metadata.Manifest {
		return metadata.Manifest{Key: node + "/" + string(rune('0'+seq)), Rev: 7, Node: node, Seq: seq, Object: node + "-obj-" + string(rune('0'+seq)), Streams: es}
	}
	withState := func(x metadata.ManifestStream, st string) metadata.ManifestStream {
		x.State = json.RawMessage(st)
		return x
	}
	const s, other = 1, 2
	all := []metadata.Manifest{
		m("a", 1, e(s, 0, 10), e(other, 0, 5)),
		m("a", 2, e(s, 20, 30), e(other, 5, 8)),
		m("a", 3, withState(e(s, 30, 30), `"closed"`)), // a state-only entry at the end (a close)
		m("b", 1, e(s, 10, 20)),
	}
	take, strip, state := chooseKeyRanges(all, s, keyPlan{first: 0, cut: 30})
	if len(take) != 3 || take[0].ms.First != 0 || take[1].ms.First != 10 || take[2].ms.Next != 30 {
		t.Fatalf("take %+v", take)
	}
	if string(state) != `"closed"` {
		t.Fatalf("state %s, want the state-only entry's at the cut", state)
	}
	changed, gone := stripRanges(all, s, strip)
	if len(changed) != 4 {
		t.Fatalf("changed %d manifests, want 4: %+v", len(changed), changed)
	}
	for _, c := range changed {
		for _, x := range c.Streams {
			if x.StreamID == s {
				t.Fatalf("manifest %s still holds a range of the stream: %+v", c.Key, x)
			}
		}
		if c.Node == "a" && c.Seq != 3 && len(c.Streams) != 1 {
			t.Fatalf("manifest %s lost the other stream's range: %+v", c.Key, c.Streams)
		}
	}
	if !gone["b-obj-1"] || !gone["a-obj-3"] || len(gone) != 2 {
		t.Fatalf("gone %v, want b's emptied object and the state-only one", gone)
	}

	// The cut stops the run at a range boundary.
	if take, _, _ := chooseKeyRanges(all, s, keyPlan{first: 0, cut: 20}); len(take) != 2 {
		t.Fatalf("cut at 20: take %+v", take)
	}
	// A hole in the registry's view stops it too.
	holed := []metadata.Manifest{m("a", 1, e(s, 0, 10)), m("a", 2, e(s, 12, 20))}
	if take, _, _ := chooseKeyRanges(holed, s, keyPlan{first: 0, cut: 20}); len(take) != 1 {
		t.Fatalf("hole: take %+v", take)
	}
	// Memory and registry disagree on where the stream starts: nothing.
	if take, _, _ := chooseKeyRanges(all, s, keyPlan{first: 5, cut: 30}); take != nil {
		t.Fatalf("disagreeing start: take %+v", take)
	}
}
