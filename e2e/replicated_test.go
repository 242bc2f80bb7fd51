package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// replicatedProducers appends numbered values to each stream through via
// (following redirects) until stop, recording every acknowledgement.
func replicatedProducers(streams []*killStream, via func(i, n int) *clusterNode, stop *atomic.Bool, errs *errorList) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				node := via(i, n)
				v := fmt.Sprintf("%s#%d", s.name, n)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := send(ctx, follow, "POST", node.URL+s.name, []byte(v), "Content-Type", "text/plain")
				cancel()
				switch {
				case err != nil || r.Status == 503:
					time.Sleep(retryBackoff) // outcome unknown: the next value is a new one
					continue
				case r.Status != 200:
					errs.add("%s via %s: status %d %s", s.name, node.ID, r.Status, bytes.TrimSpace(r.Body))
					time.Sleep(retryBackoff)
					continue
				}
				off, err := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
				if err != nil {
					errs.add("%s: ack without Pico-Offset: %v", s.name, r.Header)
					continue
				}
				s.mu.Lock()
				s.acks = append(s.acks, ack{Offset: off, Value: v, At: time.Now(), ServedBy: r.servedBy()})
				s.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return &wg
}

// checkAllAcked reports acknowledged records of s missing from recs (or
// at another offset), and checks recs hold each value at most once.
func checkAllAcked(s *killStream, recs []record) (lost int, firstErr error) {
	at := map[int64]string{}
	seen := map[string]bool{}
	for _, r := range recs {
		at[r.Offset] = r.Value
		if seen[r.Value] {
			return 0, fmt.Errorf("value %q read twice", r.Value)
		}
		seen[r.Value] = true
	}
	for _, a := range s.snapshot() {
		if at[a.Offset] != a.Value {
			lost++
			if firstErr == nil {
				firstErr = fmt.Errorf("acknowledged %q at offset %d (by %s, %s), read back %q", a.Value, a.Offset, a.ServedBy, a.At.Format("15:04:05.000"), at[a.Offset])
			}
		}
	}
	return lost, firstErr
}

// TestReplicatedMachineLost: a 3-node cluster (real etcd, real MinIO);
// `replicated` streams (R=3, M=2) and, for contrast, `local` streams, all
// owned by node A, under producer load. A is killed with SIGKILL and its
// data directory deleted ("machine lost") while most of what it
// acknowledged is not in object storage yet (--seal-max-age 10s). Every
// acknowledged record of every replicated stream reads back, in order, at
// its acknowledged offset, from the new owner; the local streams lose
// their un-uploaded tail, as documented. A then comes back with an empty
// disk, and reads through it return the same records.
func TestReplicatedMachineLost(t *testing.T) {
	opts := clusterOpts{LeaseTTL: 3 * time.Second, SealMaxAge: 10 * time.Second}
	c := startCluster(t, 3, opts)
	a := c.nodes[0]
	survivors := c.nodes[1:]
	var streams []*killStream
	for i := 0; i < 6; i++ {
		s := &killStream{name: fmt.Sprintf("/lost/r%d", i), durability: "replicated"}
		if i >= 4 {
			s.durability = "local"
		}
		streams = append(streams, s)
		r := mustSend(t, noRedirect, "PUT", a.URL+s.name, nil, "Content-Type", "text/plain", hdrDurability, s.durability)
		wantStatus(t, r.response, 201, "create "+s.name+" on A")
	}
	var stop atomic.Bool
	var errs errorList
	var killed atomic.Bool
	wg := replicatedProducers(streams, func(i, n int) *clusterNode {
		if !killed.Load() {
			return a
		}
		return survivors[(i+n)%len(survivors)]
	}, &stop, &errs)
	stopProducers := func() { stop.Store(true); wg.Wait() }
	defer stopProducers()

	if !pollUntil(60*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range streams {
			if s.count(func(ack) bool { return true }) < 30 {
				return false
			}
		}
		return true
	}) {
		stopProducers()
		errs.check(t, "producers before the kill")
		t.Fatal("streams did not reach 30 acknowledged appends each within 60s")
	}
	errs.check(t, "producers before the kill")

	killAt := time.Now()
	killed.Store(true)
	a.Kill()
	if err := os.RemoveAll(a.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (SIGKILL) and deleted its data dir at %s", a.ID, killAt.Format("15:04:05.000"))
	onSurvivor := func(x ack) bool { return x.ServedBy != a.ID }
	if !pollUntil(15*opts.LeaseTTL, 50*time.Millisecond, func() bool {
		for _, s := range streams {
			if s.count(onSurvivor) < 5 {
				return false
			}
		}
		return true
	}) {
		stopProducers()
		errs.check(t, "producers after the kill")
		for _, s := range streams {
			t.Logf("%s: %d acks on survivors", s.name, s.count(onSurvivor))
		}
		t.Fatalf("streams not writable on a survivor within %v of the kill", 15*opts.LeaseTTL)
	}
	stopProducers()
	errs.check(t, "producers")

	check := func(via *clusterNode, what string) {
		localLost := 0
		for _, s := range streams {
			recs := mustReadStreamFrom(t, via.URL, s.name, true)
			lost, err := checkAllAcked(s, recs)
			before := s.count(func(x ack) bool { return x.At.Before(killAt) })
			if s.durability == "local" {
				localLost += lost
				continue
			}
			if err != nil {
				t.Errorf("%s: %s (replicated): %d of %d acknowledged records lost: %v", what, s.name, lost, len(s.snapshot()), err)
			} else {
				t.Logf("%s: %s (replicated): all %d acknowledged records read back (%d acknowledged by the lost owner)", what, s.name, len(s.snapshot()), before)
			}
		}
		t.Logf("%s: the local streams lost %d acknowledged records with their owner's disk (their documented window)", what, localLost)
	}
	check(survivors[0], "after the machine loss")

	// The machine is replaced: same node id, empty disk.
	a.restart()
	c.waitMembers(c.nodes, 30*time.Second)
	check(a, "through the replaced node")
}
