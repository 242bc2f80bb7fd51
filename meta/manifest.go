package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
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
	sess, err := sessionOf(lease)
	if err != nil {
		return err
	}
	val, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("meta: encode manifest: %w", err)
	}
	key := r.ManifestKey(m.Node, m.Seq)
	cmps := []clientv3.Cmp{sess.fence(), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(val))}
	for _, k := range replaces {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), ">", 0))
		ops = append(ops, clientv3.OpDelete(k))
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		// The transaction may have been applied with only its response
		// lost (or ctx ended after it was sent). Read the key back: our
		// exact manifest there means it was committed. Anything else
		// stays unknown — it may yet be applied — and the caller must not
		// delete the object it references.
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
		return fmt.Errorf("%w: manifest %s exists or a replaced manifest is gone", metadata.ErrConflict, key)
	}
	return nil
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
	sess, err := sessionOf(lease)
	if err != nil {
		return err
	}
	val, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("meta: encode manifest: %w", err)
	}
	key := r.ManifestKey(m.Node, m.Seq)
	cmps := []clientv3.Cmp{sess.fence(), clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(val))}
	for _, c := range changed {
		if c.Key == "" || c.Rev == 0 {
			return fmt.Errorf("meta: swap manifests: manifest %s/%d was not read from the registry", c.Node, c.Seq)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Rev))
		if len(c.Streams) == 0 {
			ops = append(ops, clientv3.OpDelete(c.Key))
			continue
		}
		cv, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("meta: encode manifest: %w", err)
		}
		ops = append(ops, clientv3.OpPut(c.Key, string(cv)))
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
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
		g, gerr := r.cli.Get(ctx, sess.key)
		if gerr == nil && (len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != sess.createRev) {
			return metadata.ErrLeaseLost
		}
		return fmt.Errorf("%w: manifest %s exists or a changed manifest was modified", metadata.ErrConflict, key)
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
	key := r.manifestPrefix()
	end := clientv3.GetPrefixRangeEnd(key)
	for {
		resp, err := r.cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(500))
		if err != nil {
			return nil, fmt.Errorf("meta: list manifests: %w", err)
		}
		for _, kv := range resp.Kvs {
			m, err := metadata.DecodeManifest(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("%w: manifest %s: %v", metadata.ErrCorrupt, kv.Key, err)
			}
			m.Key, m.Rev = string(kv.Key), kv.ModRevision
			out = append(out, m)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
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
