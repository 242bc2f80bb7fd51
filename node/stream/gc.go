package stream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/tiering"
)

// GCConfig tunes the object collector.
type GCConfig struct {
	// Interval between collection passes.
	Interval time.Duration
	// Grace is how long an object no manifest references must exist before
	// it is deleted: an upload whose manifest is being committed right now
	// is unreferenced for a moment and must survive.
	Grace time.Duration
}

// ObjectLister is what the collector needs to find orphaned objects.
type ObjectLister interface {
	// ListObjects returns keys under prefix with their modification time.
	ListObjects(ctx context.Context, prefix string) ([]ObjectInfo, error)
}

// ObjectInfo describes one stored object.
type ObjectInfo = tiering.ObjectInfo

// ManifestDeleter removes manifests whose objects were deleted.
type ManifestDeleter interface {
	DeleteManifests(ctx context.Context, keys []string) error
}

// CollectGarbage runs one pass over this node's manifests: an object whose
// every stream range is dead (the stream was deleted, or the range lies
// below the stream's start offset after a trim or retention) is deleted,
// then its manifest. The order makes a crash harmless: a manifest whose
// object is gone is dead anyway and is removed by the next pass; an object is
// never deleted while a live range references it. A second sweep deletes
// objects no manifest references (uploads whose commit failed, or a crash
// after a commit that replaced manifests) once they are older than grace.
// Each node collects only what it wrote, so nodes never race on a manifest.
func (s *Service) CollectGarbage(ctx context.Context, grace time.Duration) (deleted int, err error) {
	if s.tier == nil || s.tcfg.Manifests == nil {
		return 0, nil
	}
	// Manifests first, streams second: a stream created after the
	// manifest listing cannot appear in it, so "absent from the streams
	// listing" really means deleted.
	ms, err := s.tcfg.Manifests.Manifests(ctx)
	if err != nil {
		return 0, err
	}
	live, err := s.startOffsets(ctx)
	if err != nil {
		return 0, err
	}
	// The manifest holding each stream's newest state snapshot: a
	// state-only entry there (e.g. a close) may be the only record of it.
	newest := map[uint64]string{}
	newestNext := map[uint64]int64{}
	for _, m := range ms {
		for _, r := range m.Streams {
			if n, ok := newestNext[r.StreamID]; !ok || r.Next >= n {
				newest[r.StreamID], newestNext[r.StreamID] = m.Key, r.Next
			}
		}
	}
	referenced := map[string]bool{}
	var deadKeys []string
	for _, m := range ms {
		referenced[m.Object] = true
		if m.Node != s.cfg.NodeID {
			continue
		}
		dead := true
		for _, r := range m.Streams {
			start, ok := live[r.StreamID]
			if ok && r.Next > start {
				dead = false
				break
			}
			if ok && r.Next == r.First && r.Next >= start && newest[r.StreamID] == m.Key {
				dead = false
				break
			}
		}
		if !dead {
			continue
		}
		if err := s.tier.Delete(ctx, m.Object); err != nil {
			return deleted, fmt.Errorf("gc: delete object %s: %w", m.Object, err)
		}
		deadKeys = append(deadKeys, m.Key)
		deleted++
		s.metrics.gcDeleted.Inc()
	}
	if len(deadKeys) > 0 {
		if d, ok := s.tcfg.Manifests.(ManifestDeleter); ok {
			if err := d.DeleteManifests(ctx, deadKeys); err != nil {
				return deleted, fmt.Errorf("gc: delete manifests: %w", err)
			}
		}
	}
	if lister, ok := s.tier.(ObjectLister); ok {
		objs, err := lister.ListObjects(ctx, tiering.L0NodePrefix(s.cfg.NodeID))
		if err != nil {
			return deleted, fmt.Errorf("gc: list objects: %w", err)
		}
		for _, o := range objs {
			if referenced[o.Key] || time.Since(o.ModTime) < grace || !strings.HasPrefix(o.Key, tiering.L0NodePrefix(s.cfg.NodeID)) {
				continue
			}
			if err := s.tier.Delete(ctx, o.Key); err != nil {
				return deleted, fmt.Errorf("gc: delete orphan %s: %w", o.Key, err)
			}
			deleted++
			s.metrics.gcDeleted.Inc()
		}
	}
	s.metrics.gcRuns.Inc()
	if deleted > 0 {
		s.cfg.Logger.Info("object storage garbage collected", "objects", deleted)
	}
	return deleted, nil
}

// RunGC collects garbage every interval until ctx is done (a job: see Jobs).
func (s *Service) RunGC(ctx context.Context, cfg GCConfig) error {
	if s.tier == nil {
		return nil
	}
	defaults.Set(&cfg.Interval, time.Minute)
	defaults.Set(&cfg.Grace, 10*time.Minute)
	every(ctx, cfg.Interval, func(ctx context.Context) {
		if _, err := s.CollectGarbage(ctx, cfg.Grace); err != nil && ctx.Err() == nil {
			s.metrics.gcErrors.Inc()
			s.cfg.Logger.Warn("garbage collection pass failed; will retry", "err", err)
		}
	})
	return nil
}

// startOffsets maps the id of every stream in the registry to the first
// offset of its log anything may still read: what garbage collection and
// compaction need of the records, 16 bytes a stream rather than every
// record held at once. Soft-deleted sources are in it (their forks read
// them). A live fork reads its source's log from the fork's own start
// offset up to the fork point, so the source's entry is lowered to that
// start when a trim or retention moved the source's past it: the source
// refuses those reads, its fork does not.
func (s *Service) startOffsets(ctx context.Context) (map[uint64]int64, error) {
	var start map[uint64]int64
	type edge struct {
		fork, source uint64
		end          int64
	}
	var forks []edge
	err := s.reg.EachStream(ctx, func() { start, forks = make(map[uint64]int64), nil }, func(m metadata.Stream) error {
		start[m.ID] = m.StartOffset
		if m.Fork != nil {
			forks = append(forks, edge{m.ID, m.Fork.SourceID, m.Fork.End})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Forks of forks: repeat until nothing moves (a chain of n forks
	// settles in n rounds).
	for range len(forks) + 1 {
		moved := false
		for _, f := range forks {
			fs, ok := start[f.fork]
			ss, sok := start[f.source]
			if ok && sok && fs < f.end && fs < ss {
				start[f.source] = fs
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	return start, nil
}
