package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClusterMixedProtocols: in a cluster of a Pico node and a Durable
// Streams node (real etcd and MinIO), a request for a stream the other node
// serves is not redirected to a path that does not exist there: it is a
// 421 protocol_mismatch naming the owner and both protocols, with no
// Location. Requests to the owner in its own protocol work, and so does
// the same stream's data through either protocol on its owner's side.
func TestClusterMixedProtocols(t *testing.T) {
	c := startCluster(t, 0, clusterOpts{})
	c.opts.Extra = []string{"--protocol", "pico"}
	pico := c.startNode("node-pico", t.TempDir())
	c.opts.Extra = []string{"--protocol", "durable-streams"}
	ds := c.startNode("node-ds", t.TempDir())
	c.nodes = []*clusterNode{pico, ds}
	c.waitMembers(c.nodes, 30*time.Second)

	wantMismatch := func(r reply, owner *clusterNode, ownerProto, selfProto, what string) {
		t.Helper()
		if r.Status != http.StatusMisdirectedRequest {
			t.Fatalf("%s: status %d (Location %q), want 421; body %s", what, r.Status, r.Header.Get("Location"), r.Body)
		}
		if loc := r.Header.Get("Location"); loc != "" {
			t.Errorf("%s: Location %q on a protocol mismatch", what, loc)
		}
		body := string(r.Body)
		for _, want := range []string{`"protocol_mismatch"`, owner.ID, ownerProto, selfProto} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: body %s does not name %q", what, body, want)
			}
		}
	}

	// A stream created on the Pico node is owned there.
	r := mustSend(t, noRedirect, "PUT", pico.URL+"/mixed/p", nil, "Content-Type", "application/json")
	if r.Status != http.StatusCreated {
		t.Fatalf("create on pico: %d %s", r.Status, r.Body)
	}
	mustSend(t, noRedirect, "POST", pico.URL+"/mixed/p", []byte(`{"n":1}`), "Content-Type", "application/json")
	wantMismatch(mustSend(t, noRedirect, "POST", ds.URL+"/v1/stream/mixed/p", []byte(`{"n":2}`), "Content-Type", "application/json"),
		pico, "pico", "durable-streams", "DS append to a Pico-owned stream")

	// And the reverse: a stream created on the Durable Streams node.
	r = mustSend(t, noRedirect, "PUT", ds.URL+"/v1/stream/mixed/d", nil, "Content-Type", "application/json")
	if r.Status != http.StatusCreated {
		t.Fatalf("create on ds: %d %s", r.Status, r.Body)
	}
	r = mustSend(t, noRedirect, "POST", ds.URL+"/v1/stream/mixed/d", []byte(`{"n":1}`), "Content-Type", "application/json")
	if r.Status/100 != 2 {
		t.Fatalf("append on the DS owner: %d %s", r.Status, r.Body)
	}
	wantMismatch(mustSend(t, noRedirect, "POST", pico.URL+"/mixed/d", []byte(`{"n":2}`), "Content-Type", "application/json"),
		ds, "durable-streams", "pico", "Pico append to a DS-owned stream")
	// A Pico HEAD has no body: the code is in Pico-Error-Code.
	r = mustSend(t, noRedirect, "HEAD", pico.URL+"/mixed/d", nil)
	if r.Status != http.StatusMisdirectedRequest || r.Header.Get("Pico-Error-Code") != "protocol_mismatch" {
		t.Errorf("HEAD of a DS-owned stream on the Pico node: %d, Pico-Error-Code %q", r.Status, r.Header.Get("Pico-Error-Code"))
	}
}
