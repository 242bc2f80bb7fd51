package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestClusterTrimThroughNonOwner trims a stream on its owner after its
// history is in object storage (so the other node serves history reads
// itself), then reads below the new start offset through the non-owner:
// the answer must be 410 offset_trimmed or a redirect to the owner, never
// the trimmed records; reads at and above the start offset still work.
func TestClusterTrimThroughNonOwner(t *testing.T) {
	c := startCluster(t, 2, clusterOpts{})
	a, b := c.nodes[0], c.nodes[1]
	const name = "/trim/history"
	wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+name, nil, "Content-Type", "text/plain").response, 201, "create on A")
	for i := 0; i < 20; i++ {
		r := mustSend(t, noRedirect, "POST", a.URL+name, []byte(fmt.Sprintf("record %d", i)), "Content-Type", "text/plain")
		wantStatus(t, r.response, 200, "append on A")
	}
	if !pollUntil(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, a.URL, "picomq_unflushed_bytes") == 0 }) {
		t.Fatal("A did not upload its records within 20s")
	}
	// B serves the uploaded history itself once it has seen the upload.
	if !pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
		r := mustSend(t, noRedirect, "GET", b.URL+name+"?offset=0", nil)
		return r.Status == 200 && r.servedBy() == b.ID
	}) {
		t.Fatal("B never served offset 0 itself")
	}

	r := mustSend(t, noRedirect, "PATCH", a.URL+"/_streams"+name, []byte(`{"trimBefore":10}`), "Content-Type", "application/json")
	wantStatus(t, r.response, 200, "trim on A")

	// The trim is in etcd before the PATCH answers: from now on no node
	// may serve offsets below 10.
	for _, off := range []int{0, 5, 9} {
		q := fmt.Sprintf("%s?offset=%d", name, off)
		r := mustSend(t, noRedirect, "GET", b.URL+q, nil)
		switch r.Status {
		case 410:
			assertErrorBody(t, r.response, "offset_trimmed")
			if r.Header.Get("Pico-Start-Offset") != "10" {
				t.Fatalf("410 for offset %d via B: Pico-Start-Offset %q, want 10", off, r.Header.Get("Pico-Start-Offset"))
			}
		case 307:
			checkRedirect(t, r, a, q, "trimmed read via B")
			f := mustSend(t, follow, "GET", b.URL+q, nil)
			wantStatus(t, f.response, 410, fmt.Sprintf("trimmed offset %d after the redirect", off))
		default:
			t.Fatalf("read of trimmed offset %d via B: %d (served by %s) %s; want 410 or 307, never data",
				off, r.Status, r.servedBy(), lastBytes(string(r.Body), 300))
		}
	}
	r = mustSend(t, follow, "GET", b.URL+name+"?offset=10", nil)
	wantStatus(t, r.response, 200, "read at the start offset via B")
	var page []jsonRecord
	if err := json.Unmarshal(r.Body, &page); err != nil || len(page) == 0 || page[0].Offset != 10 ||
		page[0].Value == nil || *page[0].Value != "record 10" {
		t.Fatalf("read at offset 10 via B: %s %v", lastBytes(string(r.Body), 300), err)
	}
}
