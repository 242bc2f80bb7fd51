package meta

// Group commit of stream creates. Creating a stream bumps the ID counter,
// so one transaction per create made concurrent creates fail each other's
// counter comparison and retry: 32 clients created ~200 streams/s. Here the
// creates that arrive while a transaction is in flight wait for the next
// one, and each transaction creates all of them at once:
//
//   - If: every stream key (and topic key) is absent, every record that
//     could hold a topic claimed with an index entry is as last seen
//     (registry.go, topicKey), and the counter is at the revision last
//     seen;
//   - Then: put every record and topic index entry, and the counter
//     advanced by the number of records;
//   - Else: read all of them back.
//
// A failed transaction tells, from the Else reads, which creates met an
// existing stream (answered with it, created=false) or a taken topic
// (ErrTopicTaken); those leave the batch alone, and the rest go round
// again with the counter just read. Nothing is acknowledged before the
// transaction holding it is committed.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultMaxTxnOps is etcd's default --max-txn-ops: the most comparisons,
// and the most operations per branch, that one transaction may hold. A
// batch of creates stays within it (up to three per create with a topic, plus the
// counter), so it works against any etcd left at its defaults.
const DefaultMaxTxnOps = 128

// maxBatchBytes bounds the keys and values of one batch, well below etcd's
// default 1.5 MiB request limit.
const maxBatchBytes = 512 << 10

// createCall is one CreateStream waiting for its batch.
type createCall struct {
	ctx       context.Context
	s         Stream // ID assigned when its batch is committed
	key, tkey string // tkey "" when no topic is asked for
	size      int    // bytes of keys and values, an upper bound

	// A topic claimed with an index entry (not keylessTopic) also compares
	// the record at aliasHolder(topic): hkey, as last seen at hrev (0:
	// absent). "" for no topic or a keyless one.
	hkey string
	hrev int64

	out     Stream
	created bool
	err     error
	done    chan struct{}
}

// createQueue holds the creates waiting for a transaction. A committer
// goroutine runs only while creates wait.
type createQueue struct {
	mu      sync.Mutex
	calls   []*createCall
	running bool

	// The ID counter as last seen by a commit: its value and its
	// ModRevision (0 = absent). Only the running committer uses them.
	lastID uint64
	idRev  int64
}

// create queues s, starts a committer if none runs, and waits for the
// outcome or ctx. A create whose ctx ends while it is still queued is never
// sent; one that is already in a transaction may be committed all the same,
// as with any etcd request whose answer is not awaited.
func (q *createQueue) create(ctx context.Context, r *Registry, s Stream) (Stream, bool, error) {
	c := &createCall{ctx: ctx, s: s, key: r.streamKey(s.Name), done: make(chan struct{})}
	if s.KafkaTopic != "" {
		c.tkey = r.topicKey(s.KafkaTopic)
		if !keylessTopic(s) {
			c.hkey = r.streamKey(aliasHolder(s.KafkaTopic))
		}
	}
	c.size = 2*len(c.key) + 2*len(c.tkey) + len(c.hkey) + len(encodeStream(s)) + 64
	q.mu.Lock()
	q.calls = append(q.calls, c)
	if !q.running {
		q.running = true
		go q.commitLoop(r)
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.created, c.err
	case <-ctx.Done():
		return Stream{}, false, context.Cause(ctx)
	}
}

// commitLoop commits batches until no create waits.
func (q *createQueue) commitLoop(r *Registry) {
	for {
		q.mu.Lock()
		batch := q.takeLocked(r.maxTxnOps)
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.commit(r, batch)
	}
}

// takeLocked removes the next batch from the queue: as many creates as fit
// one transaction, at most one per stream name and per topic (a second
// create of the same name waits for the next batch, where it finds the
// first one's stream). Creates whose ctx ended are answered at once.
func (q *createQueue) takeLocked(maxOps int) []*createCall {
	var (
		batch []*createCall
		rest  = q.calls[:0]
		ops   = 1 // the counter
		bytes int
		keys  = make(map[string]bool)
	)
	for i, c := range q.calls {
		if err := c.ctx.Err(); err != nil {
			c.finish(Stream{}, false, context.Cause(c.ctx))
			continue
		}
		need := 1 // per branch: compares, puts and reads
		if c.tkey != "" {
			need++
		}
		if c.hkey != "" {
			need++
		}
		full := len(batch) > 0 && (ops+need > maxOps || bytes+c.size > maxBatchBytes)
		if full || keys[c.key] || (c.tkey != "" && keys[c.tkey]) {
			rest = append(rest, c)
			if full {
				rest = append(rest, q.calls[i+1:]...)
				break
			}
			continue
		}
		batch = append(batch, c)
		ops += need
		bytes += c.size
		keys[c.key] = true
		if c.tkey != "" {
			keys[c.tkey] = true
		}
	}
	clear(q.calls[len(rest):])
	q.calls = rest
	return batch
}

func (c *createCall) finish(out Stream, created bool, err error) {
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

// commit creates the batch's streams, going round until each create is
// answered.
func (q *createQueue) commit(r *Registry, batch []*createCall) {
	ctx, done := batchContext(batch)
	defer done()
	for len(batch) > 0 {
		live := batch[:0]
		for _, c := range batch {
			if err := c.ctx.Err(); err != nil {
				c.finish(Stream{}, false, context.Cause(c.ctx))
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
				c.finish(Stream{}, false, err)
			}
			return
		}
	}
}

// commitOnce tries one transaction and returns the creates still to do.
func (q *createQueue) commitOnce(ctx context.Context, r *Registry, batch []*createCall) ([]*createCall, error) {
	cmps := make([]clientv3.Cmp, 0, 2*len(batch)+1)
	ops := make([]clientv3.Op, 0, 2*len(batch)+1)
	reads := make([]clientv3.Op, 0, 2*len(batch)+1)
	for i, c := range batch {
		c.s.ID = q.lastID + 1 + uint64(i)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0))
		ops = append(ops, clientv3.OpPut(c.key, string(encodeStream(c.s))))
		reads = append(reads, clientv3.OpGet(c.key))
		if c.tkey != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.tkey), "=", 0))
			reads = append(reads, clientv3.OpGet(c.tkey))
		}
		if c.hkey != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.hkey), "=", c.hrev))
			ops = append(ops, clientv3.OpPut(c.tkey, r.topicValue(c.s)))
			reads = append(reads, clientv3.OpGet(c.hkey))
		}
	}
	lastID := q.lastID + uint64(len(batch))
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r.idKey), "=", q.idRev))
	ops = append(ops, clientv3.OpPut(r.idKey, strconv.FormatUint(lastID, 10)))
	reads = append(reads, clientv3.OpGet(r.idKey))

	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Else(reads...).Commit()
	if err != nil {
		return batch, err
	}
	if resp.Succeeded {
		q.lastID, q.idRev = lastID, resp.Header.Revision
		for _, c := range batch {
			c.finish(c.s, true, nil)
		}
		return nil, nil
	}
	// Something was taken or the counter moved: the reads say what.
	rs := resp.Responses
	if kvs := rs[len(rs)-1].GetResponseRange().Kvs; len(kvs) > 0 {
		id, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
		if err != nil {
			return batch, fmt.Errorf("%w: id counter %q = %q", ErrCorrupt, r.idKey, kvs[0].Value)
		}
		q.lastID, q.idRev = id, kvs[0].ModRevision
	} else {
		q.lastID, q.idRev = 0, 0
	}
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
			owner, _ := decodeTopicEntry(topicKVs[0].Value)
			c.finish(Stream{}, false, fmt.Errorf("%w: %q belongs to %s", ErrTopicTaken, c.s.KafkaTopic, owner.Stream))
		case c.hkey != "":
			holder, held, rev, err := r.holdsTopic(holderKVs, c.s.KafkaTopic)
			switch {
			case err != nil:
				c.finish(Stream{}, false, fmt.Errorf("alias holder: %w", err))
			case held:
				c.finish(Stream{}, false, fmt.Errorf("%w: %q belongs to %s", ErrTopicTaken, c.s.KafkaTopic, holder.Name))
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
