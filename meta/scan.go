package meta

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scanRestarts bounds how often a scan starts over after the revision it
// was reading at got compacted away.
const scanRestarts = 5

// scanPrefix calls fn with every key under prefix, in key order, as of one
// etcd revision: pages after the first are read at the first page's
// revision. Each page read at the revision current when it was asked for
// could show a transaction half applied across a page boundary: a
// compaction that swaps several manifests for one merged manifest in one
// transaction could be listed with neither, and the stream offsets they
// hold would look like a gap that readers are moved past. If etcd compacts
// the revision away mid-scan, the scan starts over (reset is called first
// each time, so the caller drops what it gathered). Pages start at first
// keys and double up to most (a bulk scan's later pages cost fewer round
// trips).
func (r *Registry) scanPrefix(ctx context.Context, prefix string, first, most int64, reset func(), fn func(*mvccpb.KeyValue) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	for restart := 0; ; restart++ {
		reset()
		err := r.scanOnce(ctx, prefix, end, first, most, fn)
		if errors.Is(err, rpctypes.ErrCompacted) && restart < scanRestarts {
			continue
		}
		return err
	}
}

func (r *Registry) scanOnce(ctx context.Context, key, end string, first, most int64, fn func(*mvccpb.KeyValue) error) error {
	var rev int64
	if r.scanPage > 0 {
		first, most = r.scanPage, r.scanPage
	}
	for pageSize := first; ; pageSize = min(2*pageSize, most) {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := r.cli.Get(ctx, key, opts...)
		if err != nil {
			return err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		if r.afterScanPage != nil {
			r.afterScanPage()
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
