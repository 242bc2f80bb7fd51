package stream

// Key compaction (Kafka's cleanup.policy=compact): for every compacted
// stream this node serves, keep the latest record per key of its
// object-stored history (docs/storage.md, "Key compaction").
//
// One run of a stream:
//  1. decide from memory whether it is due (dirty ratio, max lag, a
//     tombstone's delete.retention.ms over);
//  2. read its ranges [first, cut) back from their objects, where cut is
//     the end of the last range that is uploaded, below the last stable
//     offset and older than min.compaction.lag.ms;
//  3. compactBatches, upload the result as a new object;
//  4. one etcd transaction (meta.SwapManifests, fenced on the session):
//     the new manifest, and every manifest that held one of those ranges
//     rewritten without it (deleted if nothing is left);
//  5. point the stream's index at the new object; objects no manifest
//     references any more are deleted after DeleteDelay.
//
// Nothing is rewritten in place: a reader holding a position in an old
// object keeps reading it until DeleteDelay is over, and a reader in a hole
// moves on to the next offset kept. A node that dies before step 4 leaves
// an orphan object (the collector's sweep deletes it); after step 4 the
// registry holds the compacted state and a restart or takeover builds the
// stream from it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/tiering"
)

// ManifestSwapper is the registry capability key compaction needs
// (meta.Registry has it): commit a manifest and rewrite the ones a
// stream's ranges are taken out of, in one fenced transaction.
type ManifestSwapper interface {
	SwapManifests(ctx context.Context, lease metadata.Lease, m metadata.Manifest, changed []metadata.Manifest) error
}

// maxSwapManifests bounds the manifests one run rewrites: each is a
// compare and an operation of one etcd transaction (etcd's default limit
// is 128 operations). A stream spread over more is compacted in several
// runs, oldest ranges first.
const maxSwapManifests = 64

// maxKeyCompactBytes bounds the bytes of ranges one run reads (they are
// held in memory with the rewritten copy and the key map): a larger
// stream is compacted a window from its start at a time, and each run's
// output, smaller than its input, leaves room for more ranges the next
// time.
const maxKeyCompactBytes = 512 << 20

// keyCompactState is what the compactor remembers of a stream between
// runs (in memory: after a restart every stream is dirty once).
type keyCompactState struct {
	cleanTo     int64 // offsets below were compacted by the last run
	tombstoneTS int64 // timestamp (ms) of the oldest tombstone kept (0: none)
	// pendingSince is when the stream was last seen with unflushed data
	// and uploaded at lastUploaded (segment.ms counts from it).
	pendingSince time.Time
	lastUploaded int64
}

type keyCompactMetrics struct {
	runs, failures         prometheus.Counter
	bytesIn, bytesOut      prometheus.Counter
	removed, tombstones    prometheus.Counter
	abortedDropped, forced prometheus.Counter
}

func newKeyCompactMetrics() keyCompactMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_compaction_" + name, Help: help})
	}
	return keyCompactMetrics{
		runs:           c("runs_total", "Key compaction runs committed (one stream each)."),
		failures:       c("failures_total", "Key compaction runs that failed and will be retried."),
		bytesIn:        c("bytes_in_total", "Bytes of batches read by key compaction runs."),
		bytesOut:       c("bytes_out_total", "Bytes of batches written by key compaction runs."),
		removed:        c("keys_removed_total", "Records removed by key compaction because a later record has the same key."),
		tombstones:     c("tombstones_removed_total", "Tombstones removed by key compaction after delete.retention.ms."),
		abortedDropped: c("aborted_removed_total", "Records of aborted transactions removed by key compaction."),
		forced:         c("segment_flushes_total", "Flushes asked for by key compaction because a compacted stream's unflushed data was older than segment.ms."),
	}
}

func (m keyCompactMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.failures, m.bytesIn, m.bytesOut, m.removed, m.tombstones, m.abortedDropped, m.forced}
}

// RunKeyCompactor runs CompactKeys every interval until ctx is done (a
// job: see Jobs).
func (s *Service) RunKeyCompactor(ctx context.Context, interval time.Duration) error {
	if s.tier == nil {
		return nil
	}
	if interval <= 0 {
		interval = time.Second
	}
	every(ctx, interval, func(ctx context.Context) {
		if _, err := s.CompactKeys(ctx, CompactConfig{}); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("key compaction failed; will retry", "err", err)
		}
	})
	return nil
}

// CompactKeys runs one key compaction pass over the compacted streams
// this node serves and returns how many were compacted. cfg.DeleteDelay
// is how long replaced objects stay readable.
func (s *Service) CompactKeys(ctx context.Context, cfg CompactConfig) (int, error) {
	cfg.setDefaults()
	sw, ok := s.tcfg.Manifests.(ManifestSwapper)
	if s.tier == nil || !ok {
		return 0, nil
	}
	now := s.cfg.Now()
	var due []*streamState
	flush := false
	s.compactMu.Lock()
	seen := map[uint64]bool{}
	for _, st := range s.loaded() {
		st.mu.Lock()
		c, forked := st.info.Compaction, st.info.Fork != nil || st.info.ForkRefs > 0
		st.mu.Unlock()
		if c == nil || forked {
			// A fork, and a stream forks read, share history that is a
			// snapshot for the fork: compaction would change it under it.
			continue
		}
		seen[st.info.ID] = true
		ks := s.keyState(st.info.ID)
		if s.segmentDue(st, ks, c, now) {
			flush = true
		}
		if _, ok := s.keyCompactPlan(st, ks, now); ok {
			due = append(due, st)
		}
	}
	for id := range s.keyStates {
		if !seen[id] {
			delete(s.keyStates, id) // deleted, moved away or no longer compacted
		}
	}
	s.compactMu.Unlock()
	n := 0
	var firstErr error
	if flush {
		// segment.ms: a compacted stream's records become compactable
		// once uploaded; a flush now makes them so. A failed flush does
		// not hold up the runs that are due (the flusher retries it).
		s.metrics.keys.forced.Inc()
		if err := s.Flush(ctx); err != nil {
			firstErr = fmt.Errorf("flush for segment.ms: %w", err)
		}
	}
	for _, st := range due {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		done, err := s.compactStreamKeys(ctx, sw, st, cfg)
		if err != nil {
			s.metrics.keys.failures.Inc()
			if firstErr == nil {
				firstErr = fmt.Errorf("compact keys of %s: %w", st.info.Name, err)
			}
			continue
		}
		if done {
			n++
		}
	}
	return n, firstErr
}

// keyState returns the compactor's memory of stream id (under compactMu).
func (s *Service) keyState(id uint64) *keyCompactState {
	if s.keyStates == nil {
		s.keyStates = map[uint64]*keyCompactState{}
	}
	ks := s.keyStates[id]
	if ks == nil {
		ks = &keyCompactState{}
		s.keyStates[id] = ks
	}
	return ks
}

// segmentDue reports whether st has held unflushed data for longer than
// segment.ms (under compactMu).
func (s *Service) segmentDue(st *streamState, ks *keyCompactState, c *metadata.StreamCompaction, now time.Time) bool {
	st.mu.Lock()
	uploaded, pending := st.uploaded, st.uploaded < st.hwm
	st.mu.Unlock()
	if !pending {
		ks.pendingSince = time.Time{}
		return false
	}
	if ks.pendingSince.IsZero() || uploaded > ks.lastUploaded {
		// Counted from the last upload progress: a stream written
		// continuously is not flushed on every pass once segment.ms
		// has passed.
		ks.pendingSince, ks.lastUploaded = now, uploaded
	}
	return now.Sub(ks.pendingSince) >= time.Duration(c.SegmentMs)*time.Millisecond
}

// keyPlan is a run decided from memory: compact [first, cut).
type keyPlan struct {
	first, cut, start int64
	cfg               metadata.StreamCompaction
}

// keyCompactPlan decides from st's index whether a run is due and over
// which offsets: the object chunks from the start offset while they are
// below the last stable offset and older than min.compaction.lag.ms.
func (s *Service) keyCompactPlan(st *streamState, ks *keyCompactState, now time.Time) (keyPlan, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := st.info.Compaction
	if c == nil {
		return keyPlan{}, false
	}
	p := keyPlan{first: -1, start: st.info.StartOffset, cfg: *c}
	end := min(st.uploaded, st.lastStableLocked(st.hwm))
	nowMs := now.UnixMilli()
	var total, dirty int64
	var dirtyFrom int64 = -1 // timestamp of the first dirty range
	for _, ch := range st.chunks {
		if ch.next <= p.start || ch.base == ch.next {
			continue
		}
		if ch.obj == nil || ch.gap || ch.next > end || ch.obj.MaxTimestamp > nowMs-c.MinLagMs {
			break
		}
		if p.first < 0 {
			p.first = ch.base
		}
		p.cut = ch.next
		total += ch.obj.Length
		if ch.base >= ks.cleanTo {
			dirty += ch.obj.Length
			if dirtyFrom < 0 {
				dirtyFrom = ch.obj.FirstTimestamp
			}
		}
	}
	if p.first < 0 || total == 0 {
		return p, false
	}
	switch {
	case dirty > 0 && float64(dirty)/float64(total) >= float64(c.MinDirtyRatioPPM)/1e6:
		return p, true
	case dirty > 0 && c.MaxLagMs > 0 && dirtyFrom <= nowMs-c.MaxLagMs:
		return p, true
	case ks.tombstoneTS > 0 && ks.tombstoneTS+c.DeleteRetentionMs <= nowMs:
		return p, true
	}
	return p, false
}

// keyRange is one manifest entry of the stream being compacted.
type keyRange struct {
	m  int // index into the manifest listing
	ms metadata.ManifestStream
}

// compactStreamKeys runs one compaction of st; false when it found
// nothing to do after all (the registry disagreed with memory).
func (s *Service) compactStreamKeys(ctx context.Context, sw ManifestSwapper, st *streamState, cfg CompactConfig) (bool, error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	sess, err := s.commitSession()
	if err != nil {
		return false, nil // fenced: nothing to do until the node has rejoined
	}
	now := s.cfg.Now()
	ks := s.keyState(st.info.ID)
	plan, ok := s.keyCompactPlan(st, ks, now)
	if !ok {
		return false, nil
	}
	all, err := s.tcfg.Manifests.Manifests(ctx)
	if err != nil {
		return false, err
	}
	take, strip, state := chooseKeyRanges(all, st.info.ID, plan)
	if len(take) == 0 {
		return false, nil
	}
	cut := take[len(take)-1].ms.Next
	first := take[0].ms.First
	read := s.compactReader()
	var batches [][]byte
	for _, r := range take {
		if r.ms.Next == r.ms.First {
			continue
		}
		b, err := readRange(ctx, read, refFromManifest(&all[r.m], r.ms))
		if err != nil {
			return false, err
		}
		batches = append(batches, b...)
	}
	st.mu.Lock()
	aborted := st.abortedLocked(first, cut)
	st.mu.Unlock()
	out, stats, err := compactBatches(batches, keyCompactParams{
		Start: plan.start, Now: now.UnixMilli(), DeleteRetentionMs: plan.cfg.DeleteRetentionMs, Aborted: aborted,
	})
	if err != nil {
		return false, err
	}
	seq := s.nextSeq()
	key := tiering.L0Key(s.cfg.NodeID, seq, tiering.NewNonce())
	refs, size, err := s.tier.Upload(ctx, key, []tiering.StreamBatches{{Stream: st.info.ID, Batches: out}})
	if err != nil || len(refs) != 1 {
		return false, fmt.Errorf("upload %s: %v", key, err)
	}
	ref := &refs[0]
	if ref.First != first || ref.Next != cut {
		_ = s.tier.Delete(context.WithoutCancel(ctx), key)
		return false, fmt.Errorf("compacted range [%d, %d) of %s, want [%d, %d)", ref.First, ref.Next, key, first, cut)
	}
	m := metadata.Manifest{Node: s.cfg.NodeID, Seq: seq, Object: key, Size: size, Level: 1, CreatedAt: now.UTC(),
		Streams: []metadata.ManifestStream{manifestEntry(st.info.ID, first, cut, ref, state)}}
	changed, gone := stripRanges(all, st.info.ID, strip)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = sw.SwapManifests(cctx, sess, m, changed)
	cancel()
	if err != nil {
		if !errors.Is(err, metadata.ErrCommitUnknown) {
			_ = s.tier.Delete(context.WithoutCancel(ctx), key)
		}
		if errors.Is(err, metadata.ErrLeaseLost) && sess == s.session() {
			s.fence(err)
		}
		return false, fmt.Errorf("commit %s: %w", key, err)
	}
	s.switchKeyCompacted(st, first, cut, ref)
	ks.cleanTo, ks.tombstoneTS = cut, stats.OldestTombstone
	mk := s.metrics.keys
	mk.runs.Inc()
	mk.bytesIn.Add(float64(stats.BytesIn))
	mk.bytesOut.Add(float64(stats.BytesOut))
	mk.removed.Add(float64(stats.Removed))
	mk.tombstones.Add(float64(stats.Tombstones))
	mk.abortedDropped.Add(float64(stats.Aborted))
	s.cfg.Logger.Info("compacted stream by key", "stream", st.info.Name, "from", first, "to", cut, "object", key,
		"bytes_in", stats.BytesIn, "bytes_out", stats.BytesOut, "records_in", stats.RecordsIn, "records_out", stats.RecordsOut,
		"keys_removed", stats.Removed, "tombstones_removed", stats.Tombstones, "manifests_changed", len(changed))
	s.deleteLater(gone, cfg.DeleteDelay)
	return true, nil
}

// chooseKeyRanges picks, from the manifest listing, stream id's live
// ranges from its start in offset order while they are contiguous, end
// at or before plan.cut, span at most maxSwapManifests manifests and
// maxKeyCompactBytes (at least two ranges, so a run always merges)
// (take), and the entries to take out of their manifests: those, the
// dead ones below the start, and state-only entries before the cut
// (strip, as manifest index -> entries), and the newest state snapshot
// of those.
func chooseKeyRanges(all []metadata.Manifest, id uint64, plan keyPlan) (take []keyRange, strip map[int][]metadata.ManifestStream, state json.RawMessage) {
	var rs []keyRange
	for i := range all {
		for _, e := range all[i].Streams {
			if e.StreamID == id {
				rs = append(rs, keyRange{m: i, ms: e})
			}
		}
	}
	sort.SliceStable(rs, func(a, b int) bool {
		if rs[a].ms.First != rs[b].ms.First {
			return rs[a].ms.First < rs[b].ms.First
		}
		return rs[a].ms.Next < rs[b].ms.Next
	})
	strip = map[int][]metadata.ManifestStream{}
	manifests := map[int]bool{}
	next := int64(-1)
	var bytes int64
	for _, r := range rs {
		e := r.ms
		if e.Next == e.First || e.Next <= plan.start {
			continue // state-only or dead: decided below
		}
		if len(take) >= 2 && bytes+e.Length > maxKeyCompactBytes {
			break
		}
		if next < 0 {
			if e.First != plan.first {
				break // memory and registry disagree: try again later
			}
		} else if e.First != next {
			break // a hole or an overlap in the registry's view: stop here
		}
		if e.Next > plan.cut || (!manifests[r.m] && len(manifests) >= maxSwapManifests) {
			break
		}
		manifests[r.m] = true
		take = append(take, r)
		next = e.Next
		bytes += e.Length
	}
	if len(take) == 0 {
		return nil, nil, nil
	}
	cut := take[len(take)-1].ms.Next
	for _, r := range take {
		strip[r.m] = append(strip[r.m], r.ms)
	}
	newest := take[len(take)-1]
	// Dead ranges and state-only entries up to the cut go too, within
	// the bound on manifests (the rest go in a later run, or with the
	// collector). A state-only entry at the cut (a close after the last
	// append) is newer than the data entry there: its snapshot is the one
	// the compacted entry carries, so a restart still sees it.
	for _, r := range rs {
		e := r.ms
		dead := e.Next <= plan.start && e.Next > e.First
		stateOnly := e.Next == e.First && e.Next <= cut
		if (dead || stateOnly) && (strip[r.m] != nil || len(strip) < maxSwapManifests) {
			strip[r.m] = append(strip[r.m], e)
			if stateOnly && e.Next == cut && r.m > newest.m {
				newest = r
			}
		}
	}
	return take, strip, newest.ms.State
}

// stripRanges returns the manifests of strip without the stripped
// entries of stream id, and the objects of those left with none (deleted
// with their manifest, so nothing references the object any more).
func stripRanges(all []metadata.Manifest, id uint64, strip map[int][]metadata.ManifestStream) ([]metadata.Manifest, map[string]bool) {
	idx := make([]int, 0, len(strip))
	for i := range strip {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	gone := map[string]bool{}
	changed := make([]metadata.Manifest, 0, len(idx))
	for _, i := range idx {
		m := all[i]
		drop := strip[i]
		kept := make([]metadata.ManifestStream, 0, len(m.Streams))
		for _, e := range m.Streams {
			if e.StreamID == id && containsEntry(drop, e) {
				continue
			}
			kept = append(kept, e)
		}
		m.Streams = kept
		if len(kept) == 0 {
			gone[m.Object] = true
		}
		changed = append(changed, m)
	}
	return changed, gone
}

func containsEntry(es []metadata.ManifestStream, e metadata.ManifestStream) bool {
	for _, x := range es {
		if x.First == e.First && x.Next == e.Next && x.Offset == e.Offset && x.Length == e.Length {
			return true
		}
	}
	return false
}

// switchKeyCompacted points st's index at the compacted object: its
// object chunks inside [first, cut) become one chunk.
func (s *Service) switchKeyCompacted(st *streamState, first, cut int64, ref *ObjectRef) {
	st.mu.Lock()
	defer st.mu.Unlock()
	nc := make([]chunk, 0, len(st.chunks))
	inserted := false
	for _, c := range st.chunks {
		if c.obj != nil && !c.gap && c.base >= first && c.next <= cut {
			if !inserted {
				nc = append(nc, chunk{base: first, next: cut, obj: ref})
				inserted = true
			}
			continue
		}
		nc = append(nc, c)
	}
	st.chunks = nc
	st.checkInvariantsLocked()
}
