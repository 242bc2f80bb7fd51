package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestCreatesSurviveKill9: 32 clients create streams one after another
// (their creates share etcd transactions, gathered while the clients come
// back: meta/createbatch.go), the node is SIGKILLed at a random moment and
// started again on the same data dir. Every create answered 201 must
// exist afterwards with the ID it was answered with (an answer is sent
// only once the create's transaction is committed), and the IDs of all
// answered creates must be distinct. A create whose answer the kill cut
// off may or may not exist. Several rounds on the same data dir.
func TestCreatesSurviveKill9(t *testing.T) {
	n := startNode(t, t.TempDir())
	const clients = 32
	acked := map[string]uint64{} // stream path -> ID answered
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					path := fmt.Sprintf("/crashcreate/r%d/c%d/s%d", round, c, i)
					r, err := tryDo(ctx, "PUT", n.URL+path, nil, "Content-Type", "application/octet-stream")
					if err != nil {
						return // the node died; this create's outcome is unknown
					}
					if r.Status != 201 {
						t.Errorf("PUT %s: status %d, want 201; body %s", path, r.Status, r.Body)
						return
					}
					var got struct {
						ID uint64 `json:"id"`
					}
					if err := json.Unmarshal(r.Body, &got); err != nil || got.ID == 0 {
						t.Errorf("PUT %s: answer %q has no ID (%v)", path, r.Body, err)
						return
					}
					mu.Lock()
					acked[path] = got.ID
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond) // the kill moment is random on purpose
		n.Kill()
		cancel()
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		n.restart()

		ids := map[uint64]string{}
		for path, id := range acked {
			if other, dup := ids[id]; dup {
				t.Fatalf("%s and %s were both answered with ID %d", path, other, id)
			}
			ids[id] = path
			r := do(t, "HEAD", n.URL+path, nil)
			if r.Status != 200 {
				t.Fatalf("round %d: %s was answered 201 (ID %d) before the kill; after the restart HEAD says %d", round, path, id, r.Status)
			}
			if got := r.Header.Get("Pico-Stream-Id"); got != fmt.Sprint(id) {
				t.Fatalf("round %d: %s was answered with ID %d; after the restart it has ID %s", round, path, id, got)
			}
		}
		t.Logf("round %d: %d acknowledged creates found after kill -9", round, len(acked))
	}
}
