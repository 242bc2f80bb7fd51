package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
)

// CompactConfig tunes compaction of flush objects.
type CompactConfig struct {
	// Trigger: compact when this node has more manifests than this.
	MaxManifests int
	// MaxRun bounds how many manifests one compaction merges.
	MaxRun int
	// TargetBytes bounds the size of a merged object.
	TargetBytes int64
	// DeleteDelay is how long replaced objects stay readable, for reads
	// that picked them before the swap.
	DeleteDelay time.Duration
}

func (c *CompactConfig) setDefaults() {
	if c.MaxManifests <= 0 {
		c.MaxManifests = 16
	}
	if c.MaxRun <= 0 {
		c.MaxRun = 64
	}
	if c.TargetBytes <= 0 {
		c.TargetBytes = 64 << 20
	}
	if c.DeleteDelay <= 0 {
		c.DeleteDelay = 30 * time.Second
	}
}

// Compact merges a run of this node's oldest flush objects into one larger
// object and replaces their manifests with one, in a single etcd
// transaction. Flushes keep PUTs low at ingest; compaction keeps the number
// of manifests (etcd keys) and objects proportional to the data, not to
// time. Dead ranges (deleted or trimmed streams) are dropped on the way.
//
// Only streams this node serves take part: their in-memory indexes are
// switched to the merged object before the old objects are deleted (after
// DeleteDelay, so reads that already picked an old object finish).
// It returns the number of manifests replaced (0 = nothing to do).
func (s *Service) Compact(ctx context.Context, cfg CompactConfig) (int, error) {
	cfg.setDefaults()
	if s.tier == nil || s.tcfg.Manifests == nil {
		return 0, nil
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	sess, err := s.commitSession()
	if err != nil {
		return 0, nil // fenced: nothing to do until the node has rejoined
	}
	all, err := s.tcfg.Manifests.Manifests(ctx)
	if err != nil {
		return 0, err
	}
	var mine []meta.Manifest
	for _, m := range all {
		if m.Node == s.cfg.NodeID {
			mine = append(mine, m)
		}
	}
	if len(mine) <= cfg.MaxManifests {
		return 0, nil
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Seq < mine[j].Seq })
	regs, err := s.reg.AllStreams(ctx)
	if err != nil {
		return 0, err
	}
	startOf := map[uint64]int64{}
	for _, m := range regs {
		startOf[m.ID] = m.StartOffset
	}

	// Choose the oldest run whose live streams are all served here and
	// contiguous per stream within the run.
	type rng struct {
		ref   *ObjectRef
		state json.RawMessage
		order int
	}
	per := map[uint64][]rng{}
	lastNext := map[uint64]int64{} // end of the last data range taken per stream
	var run []meta.Manifest
	var size int64
	for i, m := range mine {
		if len(run) >= cfg.MaxRun || (len(run) >= 2 && size+m.Size > cfg.TargetBytes) {
			break
		}
		ok := true
		add := map[uint64][]rng{}
		ends := map[uint64]int64{}
		for _, r := range m.Streams {
			start, live := startOf[r.StreamID]
			if !live || (r.Next <= start && r.Next > r.First) {
				continue // dead: dropped by the merge
			}
			s.mu.RLock()
			st := s.byID[r.StreamID]
			s.mu.RUnlock()
			if st == nil {
				ok = false // another node serves it: leave this object alone
				break
			}
			if r.Next > r.First {
				end, seen := ends[r.StreamID]
				if !seen {
					end, seen = lastNext[r.StreamID]
				}
				if seen && end != r.First {
					ok = false // a gap (ownership moved away and back): stop the run here
					break
				}
				ends[r.StreamID] = r.Next
			}
			add[r.StreamID] = append(add[r.StreamID], rng{ref: refFromManifest(&m, r), state: r.State, order: i})
		}
		if !ok {
			break
		}
		for id, rs := range add {
			per[id] = append(per[id], rs...)
		}
		for id, e := range ends {
			lastNext[id] = e
		}
		run = append(run, m)
		size += m.Size
	}
	if len(run) < 2 {
		return 0, nil
	}

	ids := make([]uint64, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var ups []UploadStream
	states := map[uint64]json.RawMessage{}
	spans := map[uint64][2]int64{}
	for _, id := range ids {
		rs := per[id]
		u := UploadStream{StreamID: id, First: -1}
		var newest rng
		for _, r := range rs {
			if r.order >= newest.order || newest.ref == nil {
				newest = r
			}
			if r.ref.Next == r.ref.First {
				continue
			}
			data, err := s.tier.ReadBatches(ctx, r.ref, r.ref.First, int(r.ref.Length))
			if err != nil {
				return 0, fmt.Errorf("compact: read %s: %w", r.ref.Key, err)
			}
			var got int64 = r.ref.First
			err = record.SplitBatches(data, func(b []byte, h record.BatchHeader) error {
				if h.BaseOffset >= r.ref.Next {
					return nil
				}
				u.Batches = append(u.Batches, b)
				got = h.LastOffset() + 1
				return nil
			})
			if err != nil {
				return 0, fmt.Errorf("compact: %s: %w", r.ref.Key, err)
			}
			if got != r.ref.Next {
				return 0, fmt.Errorf("compact: %s: range of stream %d ends at %d, manifest says %d", r.ref.Key, id, got, r.ref.Next)
			}
			if u.First < 0 {
				u.First = r.ref.First
			}
			u.Next = r.ref.Next
		}
		states[id] = newest.state
		if u.First < 0 {
			u.First, u.Next = newest.ref.Next, newest.ref.Next
		}
		spans[id] = [2]int64{u.First, u.Next}
		ups = append(ups, u)
	}
	seq := s.nextSeq()
	key := tiering.L0Key(s.cfg.NodeID, seq, tiering.NewNonce())
	refs, objSize, err := s.tier.Upload(ctx, key, withBatches(ups))
	if err != nil {
		return 0, fmt.Errorf("compact: upload %s: %w", key, err)
	}
	byID := map[uint64]*ObjectRef{}
	for i := range refs {
		byID[refs[i].StreamID] = &refs[i]
	}
	m := meta.Manifest{Node: s.cfg.NodeID, Seq: seq, Object: key, Size: objSize, Level: 1, CreatedAt: time.Now().UTC()}
	for _, id := range ids {
		m.Streams = append(m.Streams, manifestEntry(id, spans[id][0], spans[id][1], byID[id], states[id]))
	}
	replaced := make([]string, len(run))
	oldObjects := map[string]bool{}
	for i, r := range run {
		replaced[i] = r.Key
		oldObjects[r.Object] = true
	}
	if err := s.commitObject(ctx, sess, m, replaced); err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	// Point the served streams at the merged object.
	for _, id := range ids {
		r := byID[id]
		if r == nil {
			continue
		}
		s.mu.RLock()
		st := s.byID[id]
		s.mu.RUnlock()
		if st == nil {
			continue
		}
		st.mu.Lock()
		nc := make([]chunk, 0, len(st.chunks))
		inserted := false
		for _, c := range st.chunks {
			if c.obj != nil && oldObjects[c.obj.Key] && c.base >= r.First && c.next <= r.Next {
				if !inserted {
					nc = append(nc, chunk{base: r.First, next: r.Next, obj: r})
					inserted = true
				}
				continue
			}
			nc = append(nc, c)
		}
		st.chunks = nc
		st.mu.Unlock()
	}
	s.metrics.compactions.Inc()
	s.cfg.Logger.Info("compacted flush objects", "replaced", len(run), "object", key, "bytes", objSize)
	objs := make([]string, 0, len(oldObjects))
	for o := range oldObjects {
		objs = append(objs, o)
	}
	time.AfterFunc(cfg.DeleteDelay, func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, o := range objs {
			// A failure leaves an unreferenced object that the
			// collector's orphan sweep deletes later.
			_ = s.tier.Delete(dctx, o)
		}
	})
	return len(run), nil
}

// nextSeq allocates a manifest sequence number (shared with flushes).
func (s *Service) nextSeq() uint64 {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	s.flushSeq++
	return s.flushSeq
}

// RunCompactor compacts every interval until ctx is done.
func (s *Service) RunCompactor(ctx context.Context, interval time.Duration, cfg CompactConfig) {
	if s.tier == nil {
		return
	}
	every(ctx, interval, func(ctx context.Context) {
		for ctx.Err() == nil { // until a pass finds nothing to merge
			n, err := s.Compact(ctx, cfg)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("compaction failed; will retry", "err", err)
				}
				return
			}
			if n == 0 {
				return
			}
		}
	})
}
