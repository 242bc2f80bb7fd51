package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reservation is how far a stream's owner may hand out offsets: an owner
// writes it before it acknowledges (or lets anyone read) a record at an
// offset, so a node taking the stream over knows that no offset at or
// above End was ever handed out, and starts there. With `local` durability
// the old owner may have acknowledged records it never uploaded; those are
// lost with it, and their offsets stay a gap instead of naming other
// records. One key per stream, written ahead in batches (node/stream).
type Reservation struct {
	// Epoch is the stream's fencing epoch of the owner that wrote it.
	Epoch int64 `json:"epoch"`
	// Base is the first offset that owner could hand out in its epoch
	// (where it started after taking the stream over).
	Base int64 `json:"base"`
	// End: no offset at or above it has been handed out.
	End int64 `json:"end"`
	// Rev is the key's etcd mod revision (0: no key), for the next write.
	Rev int64 `json:"-"`
}

// ReserveOp is one stream's new reservation, written only if the key's mod
// revision is still Prev (0: no key yet).
type ReserveOp struct {
	StreamID uint64
	Prev     int64
	Res      Reservation
}

// MaxReserveOps bounds the streams of one Reserve call (etcd's default
// limit is 128 operations per transaction, compares included).
const MaxReserveOps = 100

func (r *Registry) reservePrefix() string { return r.prefix + "reserved/" }

func (r *Registry) reserveKey(id uint64) string {
	return fmt.Sprintf("%s%020d", r.reservePrefix(), id)
}

// Reservation returns stream id's reservation (Rev 0 if it has none).
func (r *Registry) Reservation(ctx context.Context, id uint64) (Reservation, error) {
	resp, err := r.cli.Get(ctx, r.reserveKey(id))
	if err != nil {
		return Reservation{}, fmt.Errorf("meta: reservation of stream %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return Reservation{}, nil
	}
	var res Reservation
	if err := json.Unmarshal(resp.Kvs[0].Value, &res); err != nil {
		return Reservation{}, fmt.Errorf("%w: reservation %s: %v", ErrCorrupt, resp.Kvs[0].Key, err)
	}
	res.Rev = resp.Kvs[0].ModRevision
	return res, nil
}

// Reservations returns every stream's reservation, by stream id.
func (r *Registry) Reservations(ctx context.Context) (map[uint64]Reservation, error) {
	out := map[uint64]Reservation{}
	prefix := r.reservePrefix()
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := r.cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(1000))
		if err != nil {
			return nil, fmt.Errorf("meta: list reservations: %w", err)
		}
		for _, kv := range resp.Kvs {
			id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), prefix), 10, 64)
			var res Reservation
			if err == nil {
				err = json.Unmarshal(kv.Value, &res)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: reservation %s: %v", ErrCorrupt, kv.Key, err)
			}
			res.Rev = kv.ModRevision
			out[id] = res
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Reserve writes ops (at most MaxReserveOps) in one transaction,
// conditioned on sess being the node's live session and on each key's mod
// revision, and returns the revision the keys now have. ErrLeaseLost: the
// session is over; ErrConflict: a key changed (re-read it).
func (r *Registry) Reserve(ctx context.Context, sess *Session, ops []ReserveOp) (int64, error) {
	if sess == nil {
		return 0, fmt.Errorf("%w: no session", ErrLeaseLost)
	}
	if len(ops) > MaxReserveOps {
		return 0, fmt.Errorf("%w: %d reservations in one transaction (max %d)", ErrInvalid, len(ops), MaxReserveOps)
	}
	cmps := []clientv3.Cmp{sess.fence()}
	puts := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		val, err := json.Marshal(op.Res)
		if err != nil {
			return 0, err
		}
		key := r.reserveKey(op.StreamID)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", op.Prev))
		puts = append(puts, clientv3.OpPut(key, string(val)))
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return 0, fmt.Errorf("meta: reserve offsets: %w", err)
	}
	if !resp.Succeeded {
		if sess.Lost() {
			return 0, ErrLeaseLost
		}
		g, gerr := r.cli.Get(ctx, sess.key)
		if gerr == nil && (len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != sess.createRev) {
			return 0, ErrLeaseLost
		}
		return 0, fmt.Errorf("%w: a reservation changed since it was read", ErrConflict)
	}
	return resp.Header.Revision, nil
}
