package meta

// Group commit of stream creates. One transaction per create made 32
// clients create ~200 streams/s; here the creates that are waiting when a
// transaction is sent all go in it, and when more wait than one
// transaction holds, up to Registry.maxCreateTxns (defaultCreateTxns)
// such transactions may be in flight at once:
//
//   - If: every stream key (and topic key) is absent, and every record
//     that could hold a topic claimed with an index entry is as last seen
//     (registry.go, topicKey);
//   - Then: put every record and topic index entry;
//
// and when it fails, one read-only transaction reads all of them back.
//
// IDs come from the registry's block (idblock.go), so transactions do not
// share a key that each of them changes: two in flight cannot fail each
// other's comparisons unless they create the same name or claim the same
// topic, and a create of a name or topic that a batch in flight holds
// waits for that batch (it then finds the first one's stream).
//
// After a failed transaction those reads tell which creates met an
// existing stream (answered with it, created=false) or a taken topic
// (ErrTopicTaken); those leave the batch alone, and the rest go round
// again with the IDs they were given. Nothing is acknowledged before the
// transaction holding it is committed.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// DefaultMaxTxnOps is etcd's default --max-txn-ops: the most comparisons,
// and the most operations per branch, that one transaction may hold. A
// batch of creates stays within it (up to three per create with a topic),
// so it works against any etcd left at its defaults.
const DefaultMaxTxnOps = 128

// defaultCreateTxns is how many create transactions one registry has in
// flight at once: one, measured (docs/benchmarks.md, 2026-12-02). Sending
// whatever waits as soon as fewer than four were in flight split the same
// creates into smaller batches, so a transaction's fixed cost (gRPC, raft
// entry, apply) fell on fewer creates: 25-30% more node CPU per create
// with 32 clients, and no faster. Sending a second one only with a full
// batch (as startLocked does) still cost ~10% more CPU per create with
// 128 clients and was no faster either, on a CPU-bound 2-core machine
// with the embedded etcd. Where etcd's commit latency rather than CPU
// bounds creates (a remote etcd cluster), more may pay; the machinery is
// kept, and tested with several, for that.
const defaultCreateTxns = 1

// maxBatchBytes bounds the keys and values of one batch, well below etcd's
// default 1.5 MiB request limit.
const maxBatchBytes = 512 << 10

// createCall is one CreateStream waiting for its batch.
type createCall struct {
	ctx       context.Context
	s         metadata.Stream // ID assigned when its batch is taken
	key, tkey string          // tkey "" when no topic is asked for
	size      int             // bytes of keys and values, an upper bound
	need      int             // operations per transaction branch: 1 to 3

	// A topic claimed with an index entry (not keylessTopic) also compares
	// the record at aliasHolder(topic): hkey, as last seen at hrev (0:
	// absent). "" for no topic or a keyless one.
	hkey string
	hrev int64

	out     metadata.Stream
	created bool
	err     error
	done    chan struct{}
}

// createQueue holds the creates waiting for a transaction. Committer
// goroutines, at most Registry.maxCreateTxns, run only while creates wait.
type createQueue struct {
	mu         sync.Mutex
	calls      []*createCall
	committers int
	inflight   int // transactions being committed
	// waitOps and waitBytes sum need and size over calls, to tell when a
	// full batch waits.
	waitOps, waitBytes int
	// held is the stream and topic keys of the batches being committed:
	// no other create of them is sent until that batch is answered.
	held map[string]bool

	// For gatherLocked: expect is how many creates the last transaction
	// held plus those waiting when it was answered, at answered; lastTxn
	// how long it took; arrived, when not nil, is closed by the create
	// that brings the waiting ones up to expect.
	expect   int
	lastTxn  time.Duration
	answered time.Time
	arrived  chan struct{}
	// lastArrival is when the last create arrived while gatherLocked
	// waited.
	lastArrival time.Time

	ids idBlocks
}

// create queues s, starts a committer if none runs, and waits for the
// outcome or ctx. A create whose ctx ends while it is still queued is never
// sent; one that is already in a transaction may be committed all the same,
// as with any etcd request whose answer is not awaited.
func (q *createQueue) create(ctx context.Context, r *Registry, s metadata.Stream) (metadata.Stream, bool, error) {
	c := &createCall{ctx: ctx, s: s, key: r.streamKey(s.Name), done: make(chan struct{})}
	if s.KafkaTopic != "" {
		c.tkey = r.topicKey(s.KafkaTopic)
		if !keylessTopic(s) {
			c.hkey = r.streamKey(aliasHolder(s.KafkaTopic))
		}
	}
	c.size = 2*len(c.key) + 2*len(c.tkey) + len(c.hkey) + len(metadata.EncodeStream(s)) + 64
	c.need = 1 // per branch: compares, puts and reads
	if c.tkey != "" {
		c.need++
	}
	if c.hkey != "" {
		c.need++
	}
	q.mu.Lock()
	q.calls = append(q.calls, c)
	q.waitOps += c.need
	q.waitBytes += c.size
	q.startLocked(r)
	q.arriveLocked(r)
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.created, c.err
	case <-ctx.Done():
		return metadata.Stream{}, false, context.Cause(ctx)
	}
}

// fullLocked reports whether the creates waiting fill a transaction.
func (q *createQueue) fullLocked(r *Registry) bool {
	return q.waitOps >= r.maxTxnOps || q.waitBytes >= maxBatchBytes
}

// startLocked starts a committer if none runs, or another one if fewer
// than r.maxCreateTxns run and the creates waiting fill a transaction.
func (q *createQueue) startLocked(r *Registry) {
	if q.committers == 0 || (q.committers < r.maxCreateTxns && q.fullLocked(r)) {
		q.committers++
		go q.commitLoop(r)
	}
}

// commitLoop commits batches until no create it may send waits. While
// other transactions are in flight it sends only a full batch: the
// creates waiting otherwise go with the next one sent when those finish
// (the last committer to finish takes whatever waits, so none is left
// behind). Creates waiting for a held key are taken in the same way once
// the batch holding it is answered.
func (q *createQueue) commitLoop(r *Registry) {
	for {
		q.mu.Lock()
		q.gatherLocked(r)
		var batch []*createCall
		if q.inflight == 0 || q.fullLocked(r) {
			batch = q.takeLocked(r.maxTxnOps)
		}
		if len(batch) == 0 {
			q.committers--
			q.mu.Unlock()
			return
		}
		q.inflight++
		if len(q.calls) > 0 {
			q.startLocked(r) // another full batch may wait
		}
		q.mu.Unlock()
		sent := slices.Clone(batch) // commit reorders batch
		start := time.Now()
		q.commit(r, batch)
		took := time.Since(start)
		q.mu.Lock()
		q.inflight--
		for _, c := range sent {
			delete(q.held, c.key)
			delete(q.held, c.tkey)
		}
		q.expect, q.lastTxn, q.answered = len(sent)+len(q.calls), took, start.Add(took)
		q.mu.Unlock()
	}
}

// gatherLocked waits, with q.mu held and released while it waits, for the
// creates the last transaction answered to come back before the next one
// is sent with no other in flight. Closed-loop clients (32 HTTP clients,
// one PUT after another) otherwise split into two alternating batches:
// while one transaction is committed the others queue, they are sent as
// soon as it is answered, and the clients it answered arrive a moment
// later to wait for that whole second transaction, so every create pays
// about two commit latencies and each transaction holds half the
// clients (docs/benchmarks.md, 2026-12-02: 14 creates per transaction on
// average out of 32, a fifth of them alone).
//
// It waits until as many creates wait as the last transaction held plus
// those that waited behind it, or a full batch waits, for as long as they
// keep coming back: the wait ends once no create arrived for the last
// transaction's commit time (at most regatherMax), counted from its
// answer and then from each arrival, and at the latest regatherCap after
// the answer. Waiting longer than a commit for a client costs more than
// it saves (it could have gone in the next transaction), and clients
// that have not come back by then are not coming soon. A lone client's
// create, expected alone, is sent at once, and one after a pause does
// not wait either.
//
// The wait is counted from the last arrival, not only from the answer,
// because answering 32 clients and reading their next requests is CPU
// work that takes as long as a commit or longer (1.5-4 ms on two shared
// cores, against commits of 1.5-3 ms), and arrives in bursts. With half
// a commit from the answer as the only bound, the first one or two back
// were sent alone and the other thirty waited for that whole transaction:
// a quarter of the transactions held one create, 18 creates per
// transaction on average (docs/benchmarks.md, "Creation: waiting for the
// clients still coming back").
func (q *createQueue) gatherLocked(r *Registry) {
	if q.inflight > 0 || len(q.calls) == 0 || len(q.calls) >= q.expect || q.fullLocked(r) {
		return
	}
	window := min(q.lastTxn, regatherMax)
	deadline := q.answered.Add(window)
	limit := q.answered.Add(regatherCap)
	for len(q.calls) < q.expect && !q.fullLocked(r) {
		if deadline.After(limit) {
			deadline = limit
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		if q.arrived == nil {
			q.arrived = make(chan struct{})
		}
		arrived := q.arrived
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-arrived:
		case <-t.C:
		}
		t.Stop()
		q.mu.Lock()
		if q.arrived == arrived {
			q.arrived = nil
		}
		// Creates that arrived while it waited push the end of the wait
		// to a window after the last of them.
		if next := q.lastArrival.Add(window); next.After(deadline) {
			deadline = next
		}
	}
	q.expect = 0 // wait once: whoever did not come back by now is gone
}

// arriveLocked notes a create's arrival while gatherLocked waits, and ends
// that wait once the creates it waits for are queued.
func (q *createQueue) arriveLocked(r *Registry) {
	if q.arrived == nil {
		return
	}
	q.lastArrival = time.Now()
	if len(q.calls) >= q.expect || q.fullLocked(r) {
		close(q.arrived)
		q.arrived = nil
	}
}

// regatherMax bounds gatherLocked's wait without arrivals, and regatherCap
// its whole wait after an answer (variables for the tests).
var (
	regatherMax = 4 * time.Millisecond
	regatherCap = 10 * time.Millisecond
)

// takeLocked removes the next batch from the queue: as many creates as fit
// one transaction, at most one per stream name and per topic in this batch
// and every batch in flight (a second create of the same name waits for
// the first to be answered, and then finds its stream). Creates whose ctx
// ended are answered at once.
func (q *createQueue) takeLocked(maxOps int) []*createCall {
	if q.held == nil {
		q.held = make(map[string]bool)
	}
	var (
		batch []*createCall
		rest  = q.calls[:0]
		ops   int
		bytes int
		keys  = q.held
	)
	for i, c := range q.calls {
		if err := c.ctx.Err(); err != nil {
			c.finish(metadata.Stream{}, false, context.Cause(c.ctx))
			q.waitOps, q.waitBytes = q.waitOps-c.need, q.waitBytes-c.size
			continue
		}
		full := len(batch) > 0 && (ops+c.need > maxOps || bytes+c.size > maxBatchBytes)
		if full || keys[c.key] || (c.tkey != "" && keys[c.tkey]) {
			rest = append(rest, c)
			if full {
				rest = append(rest, q.calls[i+1:]...)
				break
			}
			continue
		}
		batch = append(batch, c)
		ops += c.need
		bytes += c.size
		q.waitOps, q.waitBytes = q.waitOps-c.need, q.waitBytes-c.size
		keys[c.key] = true
		if c.tkey != "" {
			keys[c.tkey] = true
		}
	}
	clear(q.calls[len(rest):])
	q.calls = rest
	return batch
}

func (c *createCall) finish(out metadata.Stream, created bool, err error) {
	c.out, c.created, c.err = out, created, err
	close(c.done)
}

// batchContext is done when every create of the batch has given up, so a
// transaction nobody waits for any more is abandoned (etcd may still apply
// it, exactly as a single create's).
func batchContext(batch []*createCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, c := range batch {
		stops = append(stops, context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// commit gives the batch's creates their IDs and creates their streams,
// going round until each create is answered.
func (q *createQueue) commit(r *Registry, batch []*createCall) {
	ctx, done := batchContext(batch)
	defer done()
	ids := make([]uint64, len(batch))
	if err := q.ids.take(ctx, r, ids); err != nil {
		for _, c := range batch {
			c.finish(metadata.Stream{}, false, err)
		}
		return
	}
	for i, c := range batch {
		c.s.ID = ids[i]
	}
	for len(batch) > 0 {
		live := batch[:0]
		for _, c := range batch {
			if err := c.ctx.Err(); err != nil {
				c.finish(metadata.Stream{}, false, context.Cause(c.ctx))
				continue
			}
			live = append(live, c)
		}
		batch = live
		if len(batch) == 0 {
			return
		}
		var err error
		if batch, err = q.commitOnce(ctx, r, batch); err != nil {
			for _, c := range batch {
				c.finish(metadata.Stream{}, false, err)
			}
			return
		}
	}
}

// commitOnce tries one transaction and returns the creates still to do.
func (q *createQueue) commitOnce(ctx context.Context, r *Registry, batch []*createCall) ([]*createCall, error) {
	cmps := make([]clientv3.Cmp, 0, 2*len(batch))
	ops := make([]clientv3.Op, 0, 2*len(batch))
	for _, c := range batch {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0))
		ops = append(ops, clientv3.OpPut(c.key, string(metadata.EncodeStream(c.s))))
		if c.tkey != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.tkey), "=", 0))
		}
		if c.hkey != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.hkey), "=", c.hrev))
			ops = append(ops, clientv3.OpPut(c.tkey, r.topicValue(c.s)))
		}
	}

	resp, err := r.txnKV.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return batch, err
	}
	if resp.Succeeded {
		for _, c := range batch {
			c.finish(c.s, true, nil)
		}
		return nil, nil
	}
	// Something was taken: read what, all at one revision. The reads
	// are not part of the failed transaction (an Else branch would put
	// them in every create transaction's raft entry, and etcd would
	// decode them on every apply, for the rare conflict): what they find
	// is what holds now, and a create whose key or topic was freed in
	// between goes round again.
	reads := make([]clientv3.Op, 0, 2*len(batch))
	for _, c := range batch {
		reads = append(reads, clientv3.OpGet(c.key))
		if c.tkey != "" {
			reads = append(reads, clientv3.OpGet(c.tkey))
		}
		if c.hkey != "" {
			reads = append(reads, clientv3.OpGet(c.hkey))
		}
	}
	got, err := r.txnKV.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return batch, err
	}
	rs := got.Responses
	rest := batch[:0]
	i := 0
	for _, c := range batch {
		streamKVs := rs[i].GetResponseRange().Kvs
		i++
		var topicKVs, holderKVs []*mvccpb.KeyValue
		if c.tkey != "" {
			topicKVs = rs[i].GetResponseRange().Kvs
			i++
		}
		if c.hkey != "" {
			holderKVs = rs[i].GetResponseRange().Kvs
			i++
		}
		switch {
		case len(streamKVs) > 0:
			existing, err := r.decodeStream(streamKVs[0])
			c.finish(existing, false, err)
		case len(topicKVs) > 0:
			owner, _ := metadata.DecodeTopicEntry(topicKVs[0].Value)
			c.finish(metadata.Stream{}, false, fmt.Errorf("%w: %q belongs to %s", metadata.ErrTopicTaken, c.s.KafkaTopic, owner.Stream))
		case c.hkey != "":
			holder, held, rev, err := r.holdsTopic(holderKVs, c.s.KafkaTopic)
			switch {
			case err != nil:
				c.finish(metadata.Stream{}, false, fmt.Errorf("alias holder: %w", err))
			case held:
				c.finish(metadata.Stream{}, false, fmt.Errorf("%w: %q belongs to %s", metadata.ErrTopicTaken, c.s.KafkaTopic, holder.Name))
			default:
				c.hrev = rev // go round comparing the holder as it is now
				rest = append(rest, c)
			}
		default:
			rest = append(rest, c)
		}
	}
	return rest, nil
}
