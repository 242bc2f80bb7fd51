package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

func (r *Registry) reservePrefix() string { return r.prefix + "reserved/" }

func (r *Registry) reserveKey(id uint64) string {
	return fmt.Sprintf("%s%020d", r.reservePrefix(), id)
}

// Reservation returns stream id's reservation (Rev 0 if it has none).
func (r *Registry) Reservation(ctx context.Context, id uint64) (metadata.Reservation, error) {
	resp, err := r.cli.Get(ctx, r.reserveKey(id))
	if err != nil {
		return metadata.Reservation{}, fmt.Errorf("meta: reservation of stream %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return metadata.Reservation{}, nil
	}
	var res metadata.Reservation
	if err := json.Unmarshal(resp.Kvs[0].Value, &res); err != nil {
		return metadata.Reservation{}, fmt.Errorf("%w: reservation %s: %v", metadata.ErrCorrupt, resp.Kvs[0].Key, err)
	}
	res.Rev = resp.Kvs[0].ModRevision
	return res, nil
}

// Reservations returns every stream's reservation, by stream id.
func (r *Registry) Reservations(ctx context.Context) (map[uint64]metadata.Reservation, error) {
	out := map[uint64]metadata.Reservation{}
	prefix := r.reservePrefix()
	err := r.scanPrefix(ctx, prefix, 1000, 1000, func() { clear(out) }, func(kv *mvccpb.KeyValue) error {
		id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), prefix), 10, 64)
		var res metadata.Reservation
		if err == nil {
			err = json.Unmarshal(kv.Value, &res)
		}
		if err != nil {
			return fmt.Errorf("%w: reservation %s: %v", metadata.ErrCorrupt, kv.Key, err)
		}
		res.Rev = kv.ModRevision
		out[id] = res
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list reservations: %w", err)
	}
	return out, nil
}

// Reserve writes ops (at most MaxReserveOps) in one transaction,
// conditioned on lease being the node's live session and on each key's mod
// revision, and returns the revision the keys now have. ErrLeaseLost: the
// session is over; ErrConflict: a key changed (re-read it).
func (r *Registry) Reserve(ctx context.Context, lease metadata.Lease, ops []metadata.ReserveOp) (int64, error) {
	sess, err := sessionOf(lease)
	if err != nil {
		return 0, err
	}
	if len(ops) > metadata.MaxReserveOps {
		return 0, fmt.Errorf("%w: %d reservations in one transaction (max %d)", metadata.ErrInvalid, len(ops), metadata.MaxReserveOps)
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
			return 0, metadata.ErrLeaseLost
		}
		g, gerr := r.cli.Get(ctx, sess.key)
		if gerr == nil && (len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != sess.createRev) {
			return 0, metadata.ErrLeaseLost
		}
		return 0, fmt.Errorf("%w: a reservation changed since it was read", metadata.ErrConflict)
	}
	return resp.Header.Revision, nil
}
