package meta

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

func (r *Registry) replicaKey(id uint64) string {
	return fmt.Sprintf("%sreplicas/%020d", r.prefix, id)
}

// ReplicaSet returns stream id's replica set (Rev 0 if it has none).
func (r *Registry) ReplicaSet(ctx context.Context, id uint64) (metadata.ReplicaSet, error) {
	resp, err := r.cli.Get(ctx, r.replicaKey(id))
	if err != nil {
		return metadata.ReplicaSet{}, fmt.Errorf("meta: replica set of stream %d: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return metadata.ReplicaSet{}, nil
	}
	var rs metadata.ReplicaSet
	if err := json.Unmarshal(resp.Kvs[0].Value, &rs); err != nil {
		return metadata.ReplicaSet{}, fmt.Errorf("%w: replica set %s: %v", metadata.ErrCorrupt, resp.Kvs[0].Key, err)
	}
	rs.Rev = resp.Kvs[0].ModRevision
	return rs, nil
}

// PutReplicaSet writes stream id's replica set if lease is still the node's
// live session and the key's mod revision is still prev (0: no key), and
// returns the new revision. ErrLeaseLost: the session is over;
// ErrConflict: the key changed (another owner wrote it).
func (r *Registry) PutReplicaSet(ctx context.Context, lease metadata.Lease, id uint64, prev int64, rs metadata.ReplicaSet) (int64, error) {
	sess, err := sessionOf(lease)
	if err != nil {
		return 0, err
	}
	val, err := json.Marshal(rs)
	if err != nil {
		return 0, err
	}
	key := r.replicaKey(id)
	resp, err := r.cli.Txn(ctx).
		If(sess.fence(), clientv3.Compare(clientv3.ModRevision(key), "=", prev)).
		Then(clientv3.OpPut(key, string(val))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("meta: write replica set of stream %d: %w", id, err)
	}
	if !resp.Succeeded {
		if sess.Lost() {
			return 0, metadata.ErrLeaseLost
		}
		return 0, fmt.Errorf("%w: replica set of stream %d changed since it was read (or this node's session is over)", metadata.ErrConflict, id)
	}
	return resp.Header.Revision, nil
}

// ClusterSecret returns the cluster's shared secret for node-to-node
// requests (replication), creating it on first use. Every node can read
// etcd, which is the cluster's root of trust already; nodes present the
// secret to each other as a bearer token.
func (r *Registry) ClusterSecret(ctx context.Context) (string, error) {
	key := r.prefix + "cluster/secret"
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	fresh := hex.EncodeToString(b[:])
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, fresh)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("meta: cluster secret: %w", err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || len(kvs[0].Value) < 32 {
		return "", fmt.Errorf("%w: cluster secret", metadata.ErrCorrupt)
	}
	return string(kvs[0].Value), nil
}
