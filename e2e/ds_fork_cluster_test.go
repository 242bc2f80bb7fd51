package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestDSForkAcrossNodes: in a 2-node Durable Streams cluster (real etcd and
// MinIO), a fork created on node B of a source owned by node A is
// redirected to A (307 to the fork's own path there, docs/durable-streams.md#forks),
// where it is created beside its source; following the redirect (as curl -L
// and the clients do) creates it, it reads its inherited history and its own
// appends, and reading it through B redirects to A as for any stream.
func TestDSForkAcrossNodes(t *testing.T) {
	c := startCluster(t, 0, clusterOpts{Extra: []string{"--protocol", "durable-streams", "--long-poll-timeout", "300ms"}})
	root := t.TempDir()
	a := c.startNode("node-a", root+"/a")
	b := c.startNode("node-b", root+"/b")
	c.nodes = []*clusterNode{a, b}
	c.waitMembers(c.nodes, 30*time.Second)

	r := mustSend(t, noRedirect, "PUT", a.URL+dsPrefix+"/fx/src", nil, "Content-Type", "application/json")
	if r.Status != http.StatusCreated {
		t.Fatalf("create the source on A: %d %s", r.Status, r.Body)
	}
	r = mustSend(t, noRedirect, "POST", a.URL+dsPrefix+"/fx/src", []byte(`[{"n":0},{"n":1},{"n":2}]`), "Content-Type", "application/json")
	if r.Status/100 != 2 {
		t.Fatalf("append to the source: %d %s", r.Status, r.Body)
	}

	fork := []string{"Content-Type", "application/json", "Stream-Forked-From", dsPrefix + "/fx/src", "Stream-Fork-Offset", off(2)}
	r = mustSend(t, noRedirect, "PUT", b.URL+dsPrefix+"/fx/fork", nil, fork...)
	if r.Status != http.StatusTemporaryRedirect || r.Header.Get("Location") != a.URL+dsPrefix+"/fx/fork" {
		t.Fatalf("fork on B of a source A owns: %d Location %q, want 307 to %s; body %s",
			r.Status, r.Header.Get("Location"), a.URL+dsPrefix+"/fx/fork", r.Body)
	}
	r = mustSend(t, follow, "PUT", b.URL+dsPrefix+"/fx/fork", nil, fork...)
	if r.Status != http.StatusCreated {
		t.Fatalf("fork on B, redirect followed: %d %s", r.Status, r.Body)
	}
	r = mustSend(t, follow, "POST", b.URL+dsPrefix+"/fx/fork", []byte(`{"own":1}`), "Content-Type", "application/json")
	if r.Status/100 != 2 {
		t.Fatalf("append to the fork through B: %d %s", r.Status, r.Body)
	}
	for _, n := range []*clusterNode{a, b} {
		r = mustSend(t, follow, "GET", n.URL+dsPrefix+"/fx/fork?offset=-1", nil)
		if r.Status != http.StatusOK || string(r.Body) != `[{"n":0},{"n":1},{"own":1}]` {
			t.Fatalf("read the fork through %s: %d %s, want [{\"n\":0},{\"n\":1},{\"own\":1}]", n.ID, r.Status, r.Body)
		}
	}
	// The source is untouched by the fork's append.
	r = mustSend(t, follow, "GET", b.URL+dsPrefix+"/fx/src?offset=-1", nil)
	if string(r.Body) != `[{"n":0},{"n":1},{"n":2}]` {
		t.Fatalf("source after the fork's append: %s", r.Body)
	}
}
