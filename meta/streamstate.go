package meta

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// A stream's state record is a small value kept in etcd beside the stream
// (keyed by its incarnation id, deleted with it) and written only by the
// stream's owner, conditioned on the ownership it holds: a write made
// after a takeover fails instead of overwriting what the new owner read.
// It costs one etcd transaction, where an append with object durability
// waits for a whole flush to object storage; the Kafka transaction
// coordinator keeps each transactional id's state in it.

func (r *Registry) stateKey(id uint64) string {
	return fmt.Sprintf("%sstate/%020d", r.prefix, id)
}

// StreamState returns the state record of stream incarnation id (nil when
// it has none).
func (r *Registry) StreamState(ctx context.Context, id uint64) ([]byte, error) {
	if id == 0 {
		return nil, fmt.Errorf("meta: stream state: %w: id 0", metadata.ErrInvalid)
	}
	resp, err := r.cli.Get(ctx, r.stateKey(id))
	if err != nil {
		return nil, fmt.Errorf("meta: stream state of %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// PutStreamState replaces the state record of stream name while its record
// still has incarnation id, owner and epoch (the ownership the caller
// serves it under): in the same transaction as the write, so a takeover
// (which bumps the epoch) either happened before, and the write fails with
// metadata.ErrConflict, or after, and the new owner reads the value. rev is the
// stream record's mod revision as last returned (0: unknown, read it
// first), so a write usually costs one etcd transaction; it returns the
// revision to pass next time. A change of the record that keeps the
// ownership (a trim, a setting) is re-read and the write retried.
func (r *Registry) PutStreamState(ctx context.Context, name string, id uint64, owner string, epoch int64, rev int64, value []byte) (int64, error) {
	if err := checkName(name); err != nil {
		return 0, fmt.Errorf("meta: put stream state: %w", err)
	}
	key := r.streamKey(name)
	if rev == 0 {
		resp, err := r.cli.Get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("meta: put stream state of %q: read: %w", name, err)
		}
		if rev, err = r.checkStateOwner(name, resp.Kvs, id, owner, epoch); err != nil {
			return 0, err
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("meta: put stream state of %q: %w", name, err)
		}
		tresp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(r.stateKey(id), string(value))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("meta: put stream state of %q: %w", name, err)
		}
		if tresp.Succeeded {
			return rev, nil
		}
		if rev, err = r.checkStateOwner(name, tresp.Responses[0].GetResponseRange().Kvs, id, owner, epoch); err != nil {
			return 0, err
		}
	}
}

// checkStateOwner returns the mod revision of the stream record kvs if it
// still has incarnation id, owner and epoch.
func (r *Registry) checkStateOwner(name string, kvs []*mvccpb.KeyValue, id uint64, owner string, epoch int64) (int64, error) {
	if len(kvs) == 0 {
		return 0, fmt.Errorf("meta: put stream state of %q: %w", name, metadata.ErrNotFound)
	}
	cur, err := r.decodeStream(kvs[0])
	if err != nil {
		return 0, fmt.Errorf("meta: put stream state of %q: %w", name, err)
	}
	if cur.ID != id || cur.Owner != owner || cur.Epoch != epoch {
		return 0, fmt.Errorf("meta: put stream state of %q: %w: served as %d by %q at epoch %d, now %d by %q at epoch %d",
			name, metadata.ErrConflict, id, owner, epoch, cur.ID, cur.Owner, cur.Epoch)
	}
	return kvs[0].ModRevision, nil
}
