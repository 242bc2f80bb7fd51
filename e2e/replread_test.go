package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestReplicatedHistoryFromAnyNode: a `replicated` stream's history that
// is in object storage is served by a node that does not own it (no
// redirect), as for `local` and `object` streams: before and after its
// owner is killed (kill -9) and an in-sync follower takes over, and
// through the old owner once it restarts. A replicated fork of it reads
// back whole (inherited records and its own) through every node; through
// a non-owner its inherited range was served as a gap and skipped.
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

	// A replicated fork of it at offset 15, beside its source on A, with
	// records of its own: after the takeover the fork and its source may
	// be served by different nodes, and the fork's node reads the
	// source's history from object storage.
	const fork = "/replread/f1"
	wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+fork, nil, "Content-Type", "text/plain", hdrDurability, "replicated",
		hdrForkSource, name, hdrForkOffset, "15").response, 201, "fork on A")
	forkWant := append([]string(nil), sent[:15]...)
	for i := 0; i < 5; i++ {
		v := fmt.Sprintf("f%d", i)
		wantStatus(t, mustSend(t, noRedirect, "POST", a.URL+fork, []byte(v), "Content-Type", "text/plain").response, 200, "append "+v+" to the fork")
		forkWant = append(forkWant, v)
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
	if err := sameValues(recs, sent); err != nil {
		t.Fatalf("%s via %s: %v", name, other.ID, err)
	}
	for _, via := range survivors {
		var frecs []record
		if !pollUntil(30*time.Second, 100*time.Millisecond, func() bool {
			frecs, _, lastErr = readStreamFrom(t.Context(), follow, via.URL, fork, true)
			return lastErr == nil
		}) {
			t.Fatalf("fork %s via %s never readable after the takeover: %v", fork, via.ID, lastErr)
		}
		if err := sameValues(frecs, forkWant); err != nil {
			t.Fatalf("fork via %s: %v", via.ID, err)
		}
	}
	fh := mustSend(t, follow, "HEAD", other.URL+fork, nil)
	t.Logf("after the takeover: %s owned by %s, %s by %s", name, owner.ID, fork, fh.Header.Get(hdrOwner))

	// A comes back (its WAL kept, as after a kill -9): it owns neither,
	// and serves the source's history and the fork like any node.
	a.restart()
	c.waitMembers(c.nodes, 30*time.Second)
	q := name + "?offset=0"
	if !pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
		hist, lastErr = send(t.Context(), noRedirect, "GET", a.URL+q, nil)
		if lastErr == nil && hist.Status != 200 {
			lastErr = fmt.Errorf("status %d %s", hist.Status, hist.Body)
		}
		return lastErr == nil
	}) {
		t.Fatalf("restarted %s never served the history of %s: %v", a.ID, name, lastErr)
	}
	var frecs []record
	if !pollUntil(30*time.Second, 100*time.Millisecond, func() bool {
		frecs, _, lastErr = readStreamFrom(t.Context(), follow, a.URL, fork, true)
		return lastErr == nil
	}) {
		t.Fatalf("fork via the restarted %s: %v", a.ID, lastErr)
	}
	if err := sameValues(frecs, forkWant); err != nil {
		t.Fatalf("fork via the restarted %s: %v", a.ID, err)
	}
}
