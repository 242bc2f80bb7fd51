package meta_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
)

type createOutcome struct {
	reg     int
	want    metadata.Stream
	s       metadata.Stream
	created bool
	err     error
}

// createAllAtOnce sends every request (regs[i] creates reqs[i]'s streams)
// at once and returns the outcomes, in the order of the requests.
func createAllAtOnce(ctx context.Context, regs []*meta.Registry, reqs [][]metadata.Stream) []createOutcome {
	var (
		out   []createOutcome
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for r, list := range reqs {
		for _, s := range list {
			out = append(out, createOutcome{reg: r, want: s})
		}
	}
	for i := range out {
		wg.Go(func() {
			<-start
			o := &out[i]
			o.s, o.created, o.err = regs[o.reg].CreateStream(ctx, o.want)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// checkIDsUnique fails unless the created streams' IDs are all distinct
// and none of them is in seen; it adds them to seen.
func checkIDsUnique(t *testing.T, out []createOutcome, seen map[uint64]string) {
	t.Helper()
	for _, o := range out {
		if !o.created {
			continue
		}
		if o.s.ID == 0 {
			t.Errorf("%s created with ID 0", o.s.Name)
		}
		if prev, dup := seen[o.s.ID]; dup {
			t.Errorf("ID %d given to both %s and %s", o.s.ID, prev, o.s.Name)
		}
		seen[o.s.ID] = o.s.Name
	}
}

// checkOneCreatePerName fails unless each name in out was created exactly
// once, every other create of it got that stream, and it is the stored one.
func checkOneCreatePerName(t *testing.T, ctx context.Context, reg *meta.Registry, out []createOutcome) {
	t.Helper()
	byName := make(map[string][]createOutcome)
	for _, o := range out {
		if o.err == nil {
			byName[o.want.Name] = append(byName[o.want.Name], o)
		}
	}
	for name, os := range byName {
		var winner *createOutcome
		for i, o := range os {
			if o.created {
				if winner != nil {
					t.Errorf("%s created twice: IDs %d and %d", name, winner.s.ID, o.s.ID)
				}
				winner = &os[i]
			}
		}
		if winner == nil {
			t.Errorf("%s: %d creates, none created it", name, len(os))
			continue
		}
		for _, o := range os {
			if o.s != winner.s {
				t.Errorf("%s: a create got %+v, the created stream is %+v", name, o.s, winner.s)
			}
		}
		if got, err := reg.GetStream(ctx, name); err != nil || got != winner.s {
			t.Errorf("%s stored as %+v, %v; created as %+v", name, got, err, winner.s)
		}
	}
}

// TestTwoRegistriesCreateConcurrently: two registries on one etcd (two
// nodes) create at once, with blocks of 8 IDs so that they reserve block
// after block against each other, and small batches, four in flight on
// each, so that many of their transactions are in flight together. Some creates collide on names
// (both create /n/i), on topics (/ta/i and /tb/i claim t.i) and on a
// topic's alias holder (/h/i holds h.i without an index entry, /hx/i
// claims it). Every created stream has its own ID, every name is created
// exactly once, and each contested topic goes to exactly one stream.
func TestTwoRegistriesCreateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	regs := twoRegistries(t, 16, 4)
	for _, r := range regs {
		meta.SetIDBlockSize(r, 8)
	}
	regA, regB := regs[0], regs[1]
	const names, topics = 150, 40
	reqs := make([][]metadata.Stream, 2)
	for i := range names {
		for r := range regs {
			reqs[r] = append(reqs[r], metadata.Stream{Name: fmt.Sprintf("/n/%d", i)})
		}
		reqs[0] = append(reqs[0], metadata.Stream{Name: fmt.Sprintf("/a/%d", i)})
		reqs[1] = append(reqs[1], metadata.Stream{Name: fmt.Sprintf("/b/%d", i)})
	}
	for i := range topics {
		reqs[0] = append(reqs[0], metadata.Stream{Name: fmt.Sprintf("/ta/%d", i), KafkaTopic: fmt.Sprintf("t.%d", i)},
			metadata.Stream{Name: fmt.Sprintf("/h/%d", i), KafkaTopic: fmt.Sprintf("h.%d", i)})
		reqs[1] = append(reqs[1], metadata.Stream{Name: fmt.Sprintf("/tb/%d", i), KafkaTopic: fmt.Sprintf("t.%d", i)},
			metadata.Stream{Name: fmt.Sprintf("/hx/%d", i), KafkaTopic: fmt.Sprintf("h.%d", i)})
	}
	out := createAllAtOnce(ctx, regs, reqs)

	checkIDsUnique(t, out, make(map[uint64]string))
	checkOneCreatePerName(t, ctx, regA, out)
	winners := make(map[string][]string)
	for _, o := range out {
		switch {
		case o.err == nil && o.created && o.want.KafkaTopic != "":
			winners[o.want.KafkaTopic] = append(winners[o.want.KafkaTopic], o.want.Name)
		case o.err != nil && !errors.Is(o.err, metadata.ErrTopicTaken):
			t.Errorf("create %s: %v", o.want.Name, o.err)
		case o.err != nil && o.want.KafkaTopic == "":
			t.Errorf("create %s without a topic: %v", o.want.Name, o.err)
		case o.err == nil && !o.created && o.want.KafkaTopic != "":
			t.Errorf("create %s of a name only it asks for: created=false", o.want.Name)
		}
	}
	for i := range topics {
		for _, topic := range []string{fmt.Sprintf("t.%d", i), fmt.Sprintf("h.%d", i)} {
			w := winners[topic]
			if len(w) != 1 {
				t.Errorf("topic %s went to %v, want exactly one stream", topic, w)
				continue
			}
			if s, err := regB.LookupTopic(ctx, topic); err != nil || s.Name != w[0] {
				t.Errorf("topic %s looks up %+v, %v; want %s", topic, s, err, w[0])
			}
		}
	}
}

// TestCollidingCreatesInOverlappingTransactions: every create is its own
// transaction (max-txn-ops 1), four may be in flight on each registry,
// and eight creates of each name (four on each
// of two registries) are sent at once, so transactions in flight together
// create the same name: one create per name wins, the other seven get its
// stream.
func TestCollidingCreatesInOverlappingTransactions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	regs := twoRegistries(t, 1, 4)
	reqs := make([][]metadata.Stream, 2)
	for i := range 40 {
		for r := range regs {
			for range 4 {
				reqs[r] = append(reqs[r], metadata.Stream{Name: fmt.Sprintf("/c/%d", i)})
			}
		}
	}
	out := createAllAtOnce(ctx, regs, reqs)
	for _, o := range out {
		if o.err != nil {
			t.Errorf("create %s: %v", o.want.Name, o.err)
		}
	}
	checkIDsUnique(t, out, make(map[uint64]string))
	checkOneCreatePerName(t, ctx, regs[1], out)
}

// TestRestartedRegistryNeverReusesIDs: a registry started on the same etcd
// (a node restarted, or another node) takes IDs above the counter as it
// found it, so above every block reserved before, including IDs the old
// registry took for a create that failed and the rest of its blocks; the
// old one, still running, keeps taking IDs from its own blocks, none of
// which the new one gets.
func TestRestartedRegistryNeverReusesIDs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	old, cli := newRegistry(t)
	meta.SetIDBlockSize(old, 4)
	seen := make(map[uint64]string)
	var maxOld uint64
	for i := range 7 { // into the second block: the third is reserved ahead
		s := mustCreate(t, old, metadata.Stream{Name: fmt.Sprintf("/old/%d", i)})
		if s.ID <= maxOld {
			t.Fatalf("IDs of one registry not increasing: %d after %d", s.ID, maxOld)
		}
		maxOld = s.ID
		seen[s.ID] = s.Name
	}
	if _, created, err := old.CreateStream(ctx, metadata.Stream{Name: "/old/0"}); err != nil || created {
		t.Fatalf("create of an existing name: created=%v err=%v", created, err)
	}
	for gen := range 3 {
		ctr, err := cli.Get(ctx, testPrefix+"counters/stream-id")
		if err != nil || len(ctr.Kvs) != 1 {
			t.Fatalf("id counter: %v, %v", ctr, err)
		}
		reserved, err := strconv.ParseUint(string(ctr.Kvs[0].Value), 10, 64)
		if err != nil || reserved < maxOld {
			t.Fatalf("id counter %q, %v; want a number >= %d", ctr.Kvs[0].Value, err, maxOld)
		}
		restarted := meta.NewRegistry(cli, testPrefix)
		meta.SetIDBlockSize(restarted, 4)
		for i := range 3 {
			s := mustCreate(t, restarted, metadata.Stream{Name: fmt.Sprintf("/new/%d/%d", gen, i)})
			if s.ID <= reserved {
				t.Fatalf("restarted registry got ID %d, not above the %d reserved before it", s.ID, reserved)
			}
			if prev, dup := seen[s.ID]; dup {
				t.Fatalf("ID %d given to both %s and %s", s.ID, prev, s.Name)
			}
			seen[s.ID] = s.Name
		}
		// The first registry goes on beside it, from its own blocks.
		out := createAllAtOnce(ctx, []*meta.Registry{old}, [][]metadata.Stream{{
			{Name: fmt.Sprintf("/old/more/%d/1", gen)}, {Name: fmt.Sprintf("/old/more/%d/2", gen)},
		}})
		for _, o := range out {
			if o.err != nil || !o.created {
				t.Fatalf("create %s on the first registry: created=%v err=%v", o.want.Name, o.created, o.err)
			}
		}
		checkIDsUnique(t, out, seen)
		for id := range seen {
			maxOld = max(maxOld, id)
		}
	}
}

// twoRegistries returns two registries on one etcd (two nodes), each
// batching at most maxOps operations per create transaction with up to
// txns of them in flight. The second sends its create transactions
// in-process (Embedded.KV), as a node with the embedded etcd does.
func twoRegistries(t *testing.T, maxOps, txns int) []*meta.Registry {
	t.Helper()
	e, cli := metatest.StartEmbedded(t)
	regs := []*meta.Registry{meta.NewRegistry(cli, testPrefix), meta.NewRegistry(cli, testPrefix)}
	regs[1].UseKV(e.KV())
	for _, r := range regs {
		meta.SetMaxTxnOps(r, maxOps)
		meta.SetMaxCreateTxns(r, txns)
	}
	return regs
}
