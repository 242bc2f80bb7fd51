package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestReplicatedHistoryFromAnyNode: a `replicated` stream's history that
// is in object storage is served by a node that does not own it (no
// redirect), as for `local` and `object` streams.
func TestReplicatedHistoryFromAnyNode(t *testing.T) {
	c := startCluster(t, 3, clusterOpts{})
	a, cn := c.nodes[0], c.nodes[2]
	const name = "/replread/h1"
	wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+name, nil, "Content-Type", "text/plain", hdrDurability, "replicated").response, 201, "create on A")
	var sent []string
	for i := 0; i < 20; i++ {
		v := fmt.Sprintf("v%d", i)
		wantStatus(t, mustSend(t, noRedirect, "POST", a.URL+name, []byte(v), "Content-Type", "text/plain").response, 200, "append "+v)
		sent = append(sent, v)
	}
	if !pollUntil(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, a.URL, "picomq_unflushed_bytes") == 0 }) {
		t.Fatalf("A still has %v unflushed bytes after 20s", metric(t, a.URL, "picomq_unflushed_bytes"))
	}
	lastQ := fmt.Sprintf("%s?offset=%d", name, len(sent)-1)
	var hist reply
	var lastErr error
	if !pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
		hist, lastErr = send(t.Context(), noRedirect, "GET", cn.URL+lastQ, nil)
		if lastErr != nil {
			return false
		}
		if hist.Status == 307 {
			lastErr = redirectError(hist, a.URL+lastQ)
			return false
		}
		return true
	}) {
		t.Fatalf("C never served the uploaded history of a replicated stream: %v", lastErr)
	}
	wantStatus(t, hist.response, 200, "history read on C")
	if hist.servedBy() != cn.ID {
		t.Fatalf("served by %q, want %s", hist.servedBy(), cn.ID)
	}

	// A is lost with records not uploaded (seal is 200 ms: some are);
	// an in-sync follower takes over, adopts its copy and uploads it.
	a.Kill()
	survivors := c.nodes[1:]
	var owner, other *clusterNode
	for i := 20; i < 40; i++ {
		v := fmt.Sprintf("v%d", i)
		if !pollUntil(30*time.Second, 100*time.Millisecond, func() bool {
			r, err := send(t.Context(), follow, "POST", survivors[i%2].URL+name, []byte(v), "Content-Type", "text/plain")
			return err == nil && r.Status == 200
		}) {
			t.Fatalf("append %s after the kill not acknowledged within 30s", v)
		}
		sent = append(sent, v)
	}
	r := mustSend(t, follow, "HEAD", survivors[0].URL+name, nil)
	for _, n := range survivors {
		if n.ID == r.Header.Get(hdrOwner) {
			owner = n
		} else {
			other = n
		}
	}
	if owner == nil {
		t.Fatalf("owner after the takeover is %q, not a survivor", r.Header.Get(hdrOwner))
	}
	if !pollUntil(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, owner.URL, "picomq_unflushed_bytes") == 0 }) {
		t.Fatalf("%s still has unflushed bytes after 20s", owner.ID)
	}
	for _, off := range []int{0, 19, 39} {
		q := fmt.Sprintf("%s?offset=%d", name, off)
		if !pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
			hist, lastErr = send(t.Context(), noRedirect, "GET", other.URL+q, nil)
			if lastErr != nil {
				return false
			}
			if hist.Status != 200 {
				lastErr = fmt.Errorf("status %d %s", hist.Status, hist.Body)
				return false
			}
			return true
		}) {
			t.Fatalf("%s (not the owner %s) never served offset %d after the takeover: %v", other.ID, owner.ID, off, lastErr)
		}
	}
	recs := mustReadStreamFrom(t, other.URL, name, true)
	t.Logf("read %d records via %s", len(recs), other.ID)
}
