package stream

import (
	"fmt"
	"testing"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// TestPlacementSpreads: orphaned streams spread over the live nodes, and
// every node computes the same target.
func TestPlacementSpreads(t *testing.T) {
	members := []metadata.Member{{NodeID: "node-a"}, {NodeID: "node-b"}, {NodeID: "node-c"}}
	count := map[string]int{}
	for i := 0; i < 300; i++ {
		name := fmt.Sprintf("/orders/%d", i)
		got := placement(name, members)
		if again := placement(name, []metadata.Member{members[2], members[0], members[1]}); again.NodeID != got.NodeID {
			t.Fatalf("%s: placement depends on member order (%s vs %s)", name, got.NodeID, again.NodeID)
		}
		count[got.NodeID]++
	}
	for _, m := range members {
		if c := count[m.NodeID]; c < 70 || c > 130 {
			t.Fatalf("uneven placement of 300 streams over 3 nodes: %v", count)
		}
	}
}
