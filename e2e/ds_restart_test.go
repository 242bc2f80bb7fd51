package e2e

import (
	"testing"
	"time"
)

// TestDSStateSurvivesRestart: everything the Durable Streams facade keeps —
// data, offsets, closure, producer and Stream-Seq state, TTL and expiry,
// forks with their sub-offset cuts, soft deletes and fork references — is in
// the WAL or the registry, so it holds after the node is killed with
// SIGKILL and started again on the same data dir.
func TestDSStateSurvivesRestart(t *testing.T) {
	n := startNode(t, t.TempDir(), "--protocol", "durable-streams", "--long-poll-timeout", "300ms")
	src, f, c, j := dsURL(n, "/src"), dsURL(n, "/fork"), dsURL(n, "/closed"), dsURL(n, "/json")
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)

	wantStatus(t, do(t, "PUT", src, []byte("hello"), "Content-Type", "text/plain", "Stream-TTL", "3600"), 201, "create source")
	wantStatus(t, do(t, "POST", src, []byte(" world"), "Content-Type", "text/plain", "Stream-Seq", "0005"), 204, "append with Stream-Seq")
	wantStatus(t, do(t, "POST", src, []byte("!"), "Content-Type", "text/plain",
		"Producer-Id", "P", "Producer-Epoch", "2", "Producer-Seq", "0"), 200, "producer append")
	wantStatus(t, do(t, "POST", src, nil, "Stream-Closed", "true"), 204, "close source")

	wantStatus(t, do(t, "PUT", f, nil, "Stream-Forked-From", dsPrefix+"/src",
		"Stream-Fork-Offset", off(1), "Stream-Fork-Sub-Offset", "3", "Stream-Expires-At", expires), 201, "fork")
	wantStatus(t, do(t, "POST", f, []byte("X"), "Content-Type", "text/plain",
		"Producer-Id", "Q", "Producer-Epoch", "0", "Producer-Seq", "0"), 200, "producer append to fork")
	wantStatus(t, do(t, "PUT", c, []byte(`[1,2,3]`), "Content-Type", "application/json", "Stream-Closed", "true"), 201, "create closed")
	wantStatus(t, do(t, "PUT", j, []byte(`[{"a":1},{"b":2}]`), "Content-Type", "application/json"), 201, "create JSON")
	wantStatus(t, do(t, "DELETE", src, nil), 204, "soft-delete source")

	before := map[string]string{}
	for _, u := range []string{f, c, j} {
		r := do(t, "GET", u, nil)
		before[u] = string(r.Body) + "@" + r.Header.Get("Stream-Next-Offset")
	}

	n.Kill()
	n.restart()

	for _, u := range []string{f, c, j} {
		r := do(t, "GET", u, nil)
		if got := string(r.Body) + "@" + r.Header.Get("Stream-Next-Offset"); got != before[u] {
			t.Errorf("%s after restart reads %q, before %q", u, got, before[u])
		}
	}
	if before[f] != "hello woX@"+off(3) {
		t.Errorf("fork read %q", before[f])
	}
	// The soft-deleted source is still gone but still read through its fork.
	wantStatus(t, do(t, "HEAD", src, nil), 410, "source after restart")
	wantStatus(t, do(t, "PUT", src, nil, "Content-Type", "text/plain"), 409, "re-create soft-deleted source")

	// Fork configuration and its expiry, closure of the closed stream.
	wantStatus(t, do(t, "PUT", f, nil, "Stream-Forked-From", dsPrefix+"/src",
		"Stream-Fork-Offset", off(1), "Stream-Fork-Sub-Offset", "3", "Stream-Expires-At", expires), 409, "fork re-create: its source is soft-deleted")
	r := do(t, "HEAD", f, nil)
	wantHeader(t, r, "Stream-Expires-At", expires)
	r = do(t, "GET", c+"?offset="+off(3), nil)
	wantHeader(t, r, "Stream-Closed", "true")
	wantStatus(t, do(t, "POST", c, []byte(`4`), "Content-Type", "application/json"), 409, "append to closed after restart")
	wantStatus(t, do(t, "PUT", c, nil, "Content-Type", "application/json", "Stream-Closed", "true"), 200, "closed re-create")

	// Producer state of the fork: the retry is a duplicate, the next is new.
	wantStatus(t, do(t, "POST", f, []byte("X"), "Content-Type", "text/plain",
		"Producer-Id", "Q", "Producer-Epoch", "0", "Producer-Seq", "0"), 204, "producer retry after restart")
	wantStatus(t, do(t, "POST", f, []byte("Y"), "Content-Type", "text/plain",
		"Producer-Id", "Q", "Producer-Epoch", "0", "Producer-Seq", "1"), 200, "producer next after restart")
	if r := do(t, "GET", f, nil); string(r.Body) != "hello woXY" {
		t.Errorf("fork after restart and append: %q", r.Body)
	}

	// Deleting the last fork now removes the soft-deleted source for good.
	wantStatus(t, do(t, "DELETE", f, nil), 204, "delete fork")
	wantStatus(t, do(t, "HEAD", src, nil), 404, "source after its last fork")
	wantStatus(t, do(t, "PUT", src, nil, "Content-Type", "text/plain"), 201, "name free again")

	// A clean restart too (SIGTERM), then check once more.
	n.stop(t)
	n.restart()
	wantStatus(t, do(t, "HEAD", f, nil), 404, "deleted fork after restart")
	if r := do(t, "GET", j, nil); string(r.Body) != `[{"a":1},{"b":2}]` {
		t.Errorf("JSON after second restart: %q", r.Body)
	}
}
