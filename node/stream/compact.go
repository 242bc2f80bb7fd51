package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/meta/metadata"
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
	// Interval between RunCompactor's passes (default 10s).
	Interval time.Duration
}

func (c *CompactConfig) setDefaults() {
	defaults.Set(&c.MaxManifests, 16)
	defaults.Set(&c.MaxRun, 64)
	defaults.Set(&c.TargetBytes, 64<<20)
	defaults.Set(&c.DeleteDelay, 30*time.Second)
	defaults.Set(&c.Interval, 10*time.Second)
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
	mine, startOf, err := s.compactCandidates(ctx, cfg)
	if err != nil || mine == nil {
		return 0, err
	}
	run, per := s.chooseRun(mine, startOf, cfg)
	if len(run) < 2 {
		return 0, nil
	}
	ids, ups, states, err := s.mergeRanges(ctx, per)
	if err != nil {
		return 0, err
	}
	seq := s.nextSeq()
	key := tiering.L0Key(s.cfg.NodeID, seq, tiering.NewNonce())
	// A run of state-only manifests (streams closed with nothing new to
	// flush, see Flush) merges into a state-only manifest: like such a
	// flush, it uploads nothing (the format has no empty object).
	var refs []ObjectRef
	var objSize int64
	if batches := withBatches(ups); len(batches) > 0 {
		refs, objSize, err = s.tier.Upload(ctx, key, batches)
		if err != nil {
			return 0, fmt.Errorf("compact: upload %s: %w", key, err)
		}
	}
	byID := map[uint64]*ObjectRef{}
	for i := range refs {
		byID[refs[i].StreamID] = &refs[i]
	}
	m := metadata.Manifest{Node: s.cfg.NodeID, Seq: seq, Object: key, Size: objSize, Level: 1, CreatedAt: time.Now().UTC()}
	for i, id := range ids {
		m.Streams = append(m.Streams, manifestEntry(id, ups[i].First, ups[i].Next, byID[id], states[i]))
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
	s.switchToMerged(ids, byID, oldObjects)
	s.metrics.compactions.Inc()
	s.cfg.Logger.Info("compacted flush objects", "replaced", len(run), "object", key, "bytes", objSize)
	s.deleteLater(oldObjects, cfg.DeleteDelay)
	return len(run), nil
}

// compactCandidates returns this node's manifests in commit order, or nil
// when there are not more than cfg.MaxManifests of them, and every
// registered stream's start offset (ranges below it are dead).
func (s *Service) compactCandidates(ctx context.Context, cfg CompactConfig) ([]metadata.Manifest, map[uint64]int64, error) {
	all, err := s.tcfg.Manifests.Manifests(ctx)
	if err != nil {
		return nil, nil, err
	}
	var mine []metadata.Manifest
	for _, m := range all {
		if m.Node == s.cfg.NodeID {
			mine = append(mine, m)
		}
	}
	if len(mine) <= cfg.MaxManifests {
		return nil, nil, nil
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Seq < mine[j].Seq })
	startOf, err := s.startOffsets(ctx)
	if err != nil {
		return nil, nil, err
	}
	return mine, startOf, nil
}

// compactRange is one live stream range of a manifest in the run, with
// the stream's state snapshot and the manifest's place in the run.
type compactRange struct {
	ref   *ObjectRef
	state json.RawMessage
	order int
}

// span is the offsets [lo, hi) a run holds of one stream.
type span struct{ lo, hi int64 }

// extend returns sp grown by [first, next) if that range touches it.
func (sp span) extend(first, next int64) (span, bool) {
	switch {
	case first == sp.hi:
		return span{sp.lo, next}, true
	case next == sp.lo:
		return span{first, sp.hi}, true
	}
	return sp, false
}

// chooseRun picks the oldest run of mine whose live streams are all served
// here and contiguous per stream within the run, bounded by cfg.MaxRun and
// cfg.TargetBytes, and returns it with its live ranges per stream. A
// stream's ranges need not come in offset order: key compaction commits
// a stream's compacted older range in a manifest newer than those holding
// its later ranges (keycompact.go).
func (s *Service) chooseRun(mine []metadata.Manifest, startOf map[uint64]int64, cfg CompactConfig) ([]metadata.Manifest, map[uint64][]compactRange) {
	per := map[uint64][]compactRange{}
	lastNext := map[uint64]span{} // the offsets of the data ranges taken per stream
	var run []metadata.Manifest
	var size int64
	for i, m := range mine {
		if len(run) >= cfg.MaxRun || (len(run) >= 2 && size+m.Size > cfg.TargetBytes) {
			break
		}
		ok := true
		add := map[uint64][]compactRange{}
		ends := map[uint64]span{}
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
			st.mu.Lock()
			applied := st.uploaded
			st.mu.Unlock()
			if r.Next > applied {
				// Committed but not applied here yet: a flush between
				// its commit and its apply, or one whose commit outcome
				// was unknown and is being retried. The stream's index
				// still holds the range as WAL chunks, which the merged
				// chunk cannot replace (switchToMerged), and the flush's
				// apply would then drop the merged chunk: a hole in the
				// owner's index over everything merged. Stop the run.
				ok = false
				break
			}
			sp, seen := ends[r.StreamID]
			if !seen {
				sp, seen = lastNext[r.StreamID]
			}
			if r.Next > r.First {
				if !seen {
					sp = span{r.First, r.Next}
				} else if sp, ok = sp.extend(r.First, r.Next); !ok {
					break // a gap (ownership moved away and back): stop the run here
				}
				ends[r.StreamID] = sp
			} else if seen && r.First > sp.hi {
				// A state-only entry past the data: it records a gap
				// (snapshotFlush), which a merge ending at the data
				// would drop.
				ok = false
				break
			}
			add[r.StreamID] = append(add[r.StreamID], compactRange{ref: refFromManifest(&m, r), state: r.State, order: i})
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
	return run, per
}

// mergeRanges reads every stream's ranges of the run back from their
// objects and returns, in ascending stream order, the ids, each stream's
// merged batches with the offsets they cover, and its newest state
// snapshot.
func (s *Service) mergeRanges(ctx context.Context, per map[uint64][]compactRange) ([]uint64, []UploadStream, []json.RawMessage, error) {
	ids := make([]uint64, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	ups := make([]UploadStream, 0, len(ids))
	states := make([]json.RawMessage, 0, len(ids))
	read := s.compactReader()
	for _, id := range ids {
		u := UploadStream{StreamID: id, First: -1}
		var newest compactRange
		rs := per[id]
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].ref.First < rs[j].ref.First })
		for _, r := range rs {
			// The newest state is the one as of the highest offset (a
			// later manifest wins a tie: a state-only entry after data).
			if newest.ref == nil || r.ref.Next > newest.ref.Next || (r.ref.Next == newest.ref.Next && r.order >= newest.order) {
				newest = r
			}
			if r.ref.Next == r.ref.First {
				continue
			}
			batches, err := readRange(ctx, read, r.ref)
			if err != nil {
				return nil, nil, nil, err
			}
			u.Batches = append(u.Batches, batches...)
			if u.First < 0 {
				u.First = r.ref.First
			}
			u.Next = r.ref.Next
		}
		if u.First < 0 {
			u.First, u.Next = newest.ref.Next, newest.ref.Next
		}
		ups = append(ups, u)
		states = append(states, newest.state)
	}
	return ids, ups, states, nil
}

// WholeObjectReader is an optional Tier capability (tiering.Tier has it):
// read a whole object with one request, around the read cache. Compaction
// reads each input object once, completely, and deletes it soon after;
// through the cache its blocks evicted readers' and its reads of one
// stream range after another started read-ahead past the object's end.
type WholeObjectReader interface {
	ReadWholeObject(ctx context.Context, key string, size int64) (*tiering.WholeObject, error)
}

// rangeReader reads the batches of ref's range from offset from.
type rangeReader func(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) ([]byte, error)

// compactReader returns how one compaction reads its input ranges: each
// object read whole once, and kept for the compaction's other ranges in
// it, when the tier can; through Tier.ReadBatches otherwise.
func (s *Service) compactReader() rangeReader {
	wr, ok := s.tier.(WholeObjectReader)
	if !ok {
		return s.tier.ReadBatches
	}
	objs := map[string]*tiering.WholeObject{}
	return func(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) ([]byte, error) {
		o := objs[ref.Key]
		if o == nil {
			var err error
			if o, err = wr.ReadWholeObject(ctx, ref.Key, ref.ObjectSize); err != nil {
				return nil, err
			}
			objs[ref.Key] = o
		}
		return o.ReadBatches(ctx, ref, from, maxBytes)
	}
}

// readRange returns the batches of ref's range, checking that they cover
// exactly its offsets.
func readRange(ctx context.Context, read rangeReader, ref *ObjectRef) ([][]byte, error) {
	data, err := read(ctx, ref, ref.First, int(ref.Length))
	if err != nil {
		return nil, fmt.Errorf("compact: read %s: %w", ref.Key, err)
	}
	var batches [][]byte
	got := ref.First
	err = record.SplitBatches(data, func(b []byte, h record.BatchHeader) error {
		if h.BaseOffset >= ref.Next {
			return nil
		}
		batches = append(batches, b)
		got = h.LastOffset() + 1
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("compact: %s: %w", ref.Key, err)
	}
	if got != ref.Next {
		return nil, fmt.Errorf("compact: %s: range of stream %d ends at %d, manifest says %d", ref.Key, ref.StreamID, got, ref.Next)
	}
	return batches, nil
}

// switchToMerged points the served streams' indexes at the merged object:
// each stream's chunks in the replaced objects become one chunk.
func (s *Service) switchToMerged(ids []uint64, byID map[uint64]*ObjectRef, oldObjects map[string]bool) {
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
		if i, j, ok := mergedSpan(st.chunks, r, oldObjects); ok {
			nc := make([]chunk, 0, len(st.chunks)-(j-i)+1)
			nc = append(nc, st.chunks[:i]...)
			nc = append(nc, chunk{base: r.First, next: r.Next, obj: r})
			st.chunks = append(nc, st.chunks[j:]...)
			st.checkInvariantsLocked()
		}
		// Otherwise the index keeps the replaced objects' chunks: they
		// stay readable for DeleteDelay, and a read after that meets a
		// missing object and rebuilds the index from the manifests.
		st.mu.Unlock()
	}
}

// mergedSpan finds the chunks [i, j) of chunks that the merged range r
// replaces: consecutive chunks of the replaced objects covering exactly
// [r.First, r.Next). ok is false when the index does not hold the range
// that way (part of it not applied yet, or already switched), so that
// replacing would leave a hole or an overlap.
func mergedSpan(chunks []chunk, r *ObjectRef, oldObjects map[string]bool) (i, j int, ok bool) {
	i = sort.Search(len(chunks), func(k int) bool { return chunks[k].next > r.First })
	at := r.First
	for j = i; j < len(chunks) && at < r.Next; j++ {
		c := chunks[j]
		if c.base != at || c.obj == nil || !oldObjects[c.obj.Key] || c.next > r.Next {
			return 0, 0, false
		}
		at = c.next
	}
	return i, j, at == r.Next && j > i
}

// deleteLater deletes the replaced objects after delay, so that reads
// that picked one before the swap finish. A failure, or a Close before
// the delay is over, leaves an unreferenced object that the collector's
// orphan sweep deletes later.
func (s *Service) deleteLater(objects map[string]bool, delay time.Duration) {
	objs := make([]string, 0, len(objects))
	for o := range objects {
		objs = append(objs, o)
	}
	s.bg.Go(func(ctx context.Context) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, o := range objs {
			_ = s.tier.Delete(dctx, o)
		}
	})
}

// nextSeq allocates a manifest sequence number (shared with flushes).
func (s *Service) nextSeq() uint64 {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	s.flushSeq++
	return s.flushSeq
}

// RunCompactor compacts every cfg.Interval until ctx is done (a job: see
// Jobs).
func (s *Service) RunCompactor(ctx context.Context, cfg CompactConfig) error {
	if s.tier == nil {
		return nil
	}
	cfg.setDefaults()
	every(ctx, cfg.Interval, func(ctx context.Context) {
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
	return nil
}
