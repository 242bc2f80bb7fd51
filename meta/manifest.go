package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func (r *Registry) manifestPrefix() string { return r.prefix + "manifests/" }

// ManifestKey is the etcd key of a node's manifest number seq; zero-padded so
// keys sort in commit order.
func (r *Registry) ManifestKey(node string, seq uint64) string {
	return fmt.Sprintf("%s%s/%020d", r.manifestPrefix(), node, seq)
}

// CommitManifest stores m and deletes the manifests whose keys are in
// replaces, atomically, only if lease is still the node's live session and
// every replaced manifest still exists. A node whose lease expired — and
// which may have been declared dead and had its streams taken over — gets
// ErrLeaseLost and commits nothing.
func (r *Registry) CommitManifest(ctx context.Context, lease metadata.Lease, m metadata.Manifest, replaces []string) error {
	t, err := r.newManifestTxn(lease, m)
	if err != nil {
		return err
	}
	for _, k := range replaces {
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
		t.ops = append(t.ops, clientv3.OpDelete(k))
	}
	return r.commitManifest(ctx, t, "exists or a replaced manifest is gone")
}

// SwapManifests commits m, a new manifest, and in the same transaction
// rewrites each manifest of changed in place (same key: a node's commit
// order is kept) or deletes it when it has no stream left, only if lease
// is still the node's live session and none of changed was modified since
// it was read (Rev). Key compaction (node/stream/keycompact.go) moves one
// stream's ranges out of the objects it shared with other streams this
// way: the other streams' ranges stay where they are. Errors are those of
// CommitManifest.
func (r *Registry) SwapManifests(ctx context.Context, lease metadata.Lease, m metadata.Manifest, changed []metadata.Manifest) error {
	t, err := r.newManifestTxn(lease, m)
	if err != nil {
		return err
	}
	for _, c := range changed {
		if c.Key == "" || c.Rev == 0 {
			return fmt.Errorf("meta: swap manifests: manifest %s/%d was not read from the registry", c.Node, c.Seq)
		}
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Rev))
		if len(c.Streams) == 0 {
			t.ops = append(t.ops, clientv3.OpDelete(c.Key))
			continue
		}
		cv, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("meta: encode manifest: %w", err)
		}
		t.ops = append(t.ops, clientv3.OpPut(c.Key, string(cv)))
	}
	return r.commitManifest(ctx, t, "exists or a changed manifest was modified")
}

// manifestTxn is the etcd transaction that writes a new manifest: its
// conditions (the session's fence, the key not yet written, and what the
// caller adds) and operations.
type manifestTxn struct {
	sess *Session
	key  string
	val  []byte
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

func (r *Registry) newManifestTxn(lease metadata.Lease, m metadata.Manifest) (*manifestTxn, error) {
	sess, err := sessionOf(lease)
	if err != nil {
		return nil, err
	}
	val, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("meta: encode manifest: %w", err)
	}
	key := r.ManifestKey(m.Node, m.Seq)
	return &manifestTxn{sess: sess, key: key, val: val,
		cmps: []clientv3.Cmp{sess.fence(), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		ops:  []clientv3.Op{clientv3.OpPut(key, string(val))}}, nil
}

// commitManifest runs t and says which way it went: nil, ErrCommitUnknown
// (the caller must not delete the object the manifest references),
// ErrLeaseLost, or ErrConflict with conflict as the reason.
func (r *Registry) commitManifest(ctx context.Context, t *manifestTxn, conflict string) error {
	sess, key, val := t.sess, t.key, t.val
	resp, err := r.cli.Txn(ctx).If(t.cmps...).Then(t.ops...).Commit()
	if err != nil {
		// The transaction may have been applied with only its response
		// lost (or ctx ended after it was sent). Read the key back: our
		// exact manifest there means it was committed. Anything else
		// stays unknown — it may yet be applied.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		g, gerr := r.cli.Get(gctx, key)
		if gerr == nil && len(g.Kvs) == 1 && string(g.Kvs[0].Value) == string(val) {
			return nil
		}
		return fmt.Errorf("%w: manifest %s: %v", metadata.ErrCommitUnknown, key, err)
	}
	if !resp.Succeeded {
		if sess.Lost() {
			return metadata.ErrLeaseLost
		}
		// Find out which condition failed, to say it plainly.
		g, gerr := r.cli.Get(ctx, sess.key)
		if gerr == nil && (len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != sess.createRev) {
			return metadata.ErrLeaseLost
		}
		return fmt.Errorf("%w: manifest %s %s", metadata.ErrConflict, key, conflict)
	}
	return nil
}

// DeleteManifests removes manifests whose objects are gone (retention,
// stream deletion). Deleting an absent key is not an error.
func (r *Registry) DeleteManifests(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 64) // stay under etcd's max ops per txn
		ops := make([]clientv3.Op, 0, n)
		for _, k := range keys[:n] {
			ops = append(ops, clientv3.OpDelete(k))
		}
		if _, err := r.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("meta: delete manifests: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}

// Manifests returns every manifest, in key order (per node, commit order).
func (r *Registry) Manifests(ctx context.Context) ([]metadata.Manifest, error) {
	var out []metadata.Manifest
	err := r.scanPrefix(ctx, r.manifestPrefix(), 500, 500, func() { out = out[:0] }, func(kv *mvccpb.KeyValue) error {
		m, err := metadata.DecodeManifest(kv.Value)
		if err != nil {
			return fmt.Errorf("%w: manifest %s: %v", metadata.ErrCorrupt, kv.Key, err)
		}
		m.Key, m.Rev = string(kv.Key), kv.ModRevision
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list manifests: %w", err)
	}
	return out, nil
}

// MaxManifestSeq returns the highest manifest sequence number node has
// committed (0 if none), so a restarted node continues numbering.
func (r *Registry) MaxManifestSeq(ctx context.Context, node string) (uint64, error) {
	prefix := r.manifestPrefix() + node + "/"
	resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return 0, fmt.Errorf("meta: last manifest of %s: %w", node, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	seq, err := strconv.ParseUint(strings.TrimPrefix(string(resp.Kvs[0].Key), prefix), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: manifest key %s", metadata.ErrCorrupt, resp.Kvs[0].Key)
	}
	return seq, nil
}
