package meta

// Stream IDs are taken in blocks. The counter key (prefix +
// "counters/stream-id", a decimal number) holds the highest ID handed out
// to any block so far; a registry reserves the next block by advancing it
// with a compare-and-swap transaction of its own, and create transactions
// take IDs from the local block without touching the counter. So create
// transactions of one node, and of different nodes, no longer compare a
// key they all change, and can be in flight together (createbatch.go).
//
// Versions before blocks advanced the same key by the size of each create
// batch, comparing its revision, so the first block after an upgrade
// starts above every ID they gave, and a node of either kind sees the
// other's advances: IDs stay unique in a mixed cluster too.
//
// An ID taken for a create that then fails, and the rest of a block when
// its registry stops, are never used: IDs are unique forever, increasing
// create after create on one registry, but not ordered across registries.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// idBlockSize is the number of IDs one reservation takes. A reservation is
// one etcd transaction on a key every node's reservations contend for, so
// it should be rare: one per thousand creates is nothing beside the
// creates' own transactions. What a restart or crash wastes (at most this
// block and the one reserved ahead) is nothing in a 64-bit space either.
const idBlockSize = 1024

// idReserveTimeout bounds one reservation made ahead of need, which no
// caller's context covers: a create waiting for it still gives up with its
// own context, and the next one starts a fresh reservation.
const idReserveTimeout = 30 * time.Second

// idBlocks hands out the IDs of one registry.
type idBlocks struct {
	mu         sync.Mutex
	next, left uint64         // the current block: left IDs from next on
	ahead      *idReservation // the following block, reserving or reserved; nil if none

	// The counter as last seen (value and ModRevision, 0 when absent),
	// for the next reservation's comparison. Only the one reservation in
	// flight uses them.
	seen    uint64
	seenRev int64
}

// idReservation is one block reservation, first to last; valid once done
// is closed and err is nil.
type idReservation struct {
	done        chan struct{}
	first, last uint64
	err         error
}

// take fills ids with fresh IDs, in increasing order. It waits for a
// reservation only when the current block is used up and the one reserved
// ahead (started when the current block is half used) has not come back.
func (b *idBlocks) take(ctx context.Context, r *Registry, ids []uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range ids {
		for b.left == 0 {
			if b.ahead == nil {
				b.reserveAheadLocked(r)
			}
			res := b.ahead
			b.mu.Unlock()
			select {
			case <-res.done:
			case <-ctx.Done():
			}
			b.mu.Lock()
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			if b.ahead != res {
				continue // another taker got there first
			}
			b.ahead = nil
			if res.err != nil {
				return res.err
			}
			b.next, b.left = res.first, res.last-res.first+1
		}
		ids[i] = b.next
		b.next++
		b.left--
	}
	if b.left < r.idBlock/2 && b.ahead == nil {
		b.reserveAheadLocked(r)
	}
	return nil
}

// reserveAheadLocked starts reserving the next block in the background.
func (b *idBlocks) reserveAheadLocked(r *Registry) {
	res := &idReservation{done: make(chan struct{})}
	b.ahead = res
	seen, rev := b.seen, b.seenRev
	go func() {
		defer close(res.done)
		ctx, cancel := context.WithTimeout(context.Background(), idReserveTimeout)
		defer cancel()
		first, seen, rev, err := r.reserveIDs(ctx, seen, rev)
		b.mu.Lock()
		b.seen, b.seenRev = seen, rev
		b.mu.Unlock()
		res.first, res.last, res.err = first, seen, err
	}()
}

// reserveIDs advances the counter by one block (r.idBlock) from seen, if it is still
// at revision rev (0: absent), going round with the value read back
// otherwise, and returns the block's first ID and the counter as it left
// it.
func (r *Registry) reserveIDs(ctx context.Context, seen uint64, rev int64) (first, last uint64, lastRev int64, err error) {
	for {
		next := seen + r.idBlock
		resp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(r.idKey), "=", rev)).
			Then(clientv3.OpPut(r.idKey, strconv.FormatUint(next, 10))).
			Else(clientv3.OpGet(r.idKey)).
			Commit()
		if err != nil {
			return 0, seen, rev, fmt.Errorf("reserve stream ids: %w", err)
		}
		if resp.Succeeded {
			return seen + 1, next, resp.Header.Revision, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			seen, rev = 0, 0
			continue
		}
		id, err := strconv.ParseUint(string(kvs[0].Value), 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: id counter %q = %q", metadata.ErrCorrupt, r.idKey, kvs[0].Value)
		}
		seen, rev = id, kvs[0].ModRevision
	}
}
