package stream

// Takeover of a `replicated` stream (docs/durability.md): only a live
// in-sync follower may take it over, and it serves only once it holds
// every acknowledged record and has put them in object storage.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/wal"
)

// takeoverCandidates narrows the live members that may take m over: for a
// replicated stream, the live members of its in-sync set.
func (s *Service) takeoverCandidates(ctx context.Context, m metadata.Stream, members []metadata.Member) ([]metadata.Member, error) {
	if !s.replicatedRecord(m) {
		return members, nil
	}
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return members, nil
	}
	set, err := rsets.ReplicaSet(ctx, m.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: registry unreachable: %v", ErrUnavailable, err)
	}
	if set.Rev == 0 {
		return members, nil // never replicated anything: nothing to lose
	}
	var out []metadata.Member
	for _, mb := range members {
		if slices.Contains(set.InSync, mb.NodeID) {
			out = append(out, mb)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no in-sync copy of %s is on a live node (in sync: %v); it waits for one to return", ErrNotEnoughReplicas, m.Name, set.InSync)
	}
	return out, nil
}

// adoptCopies completes the state of a replicated stream this node now
// serves (a takeover, or its owner restarting without the WAL entries of
// its epoch) and which holds what object storage holds: it pulls the
// copies of the in-sync followers (which fences them at this epoch, so the
// previous owner can no longer count them), keeps the longest with its
// own, applies it and uploads it. st is loaded but refuses appends
// (moving); st.mu not held.
func (s *Service) adoptCopies(ctx context.Context, st *streamState) error {
	st.mu.Lock()
	id, name, epoch, from := st.info.ID, st.info.Name, st.info.Epoch, st.next
	st.mu.Unlock()
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return nil
	}
	set, err := rsets.ReplicaSet(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: replica set of %s: %v", ErrUnavailable, name, err)
	}
	members, err := s.liveMembers(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	live := map[string]bool{}
	for _, m := range members {
		live[m.NodeID] = true
	}
	// Every follower is fenced; the in-sync ones' copies count.
	var ask []string
	for _, n := range append(slices.Clone(set.InSync), set.Followers...) {
		if n != s.cfg.NodeID && live[n] && !slices.Contains(ask, n) {
			ask = append(ask, n)
		}
	}
	bestEnd, bestNode := s.copyEnd(id, from), s.cfg.NodeID
	if !slices.Contains(set.InSync, s.cfg.NodeID) {
		bestEnd = from // a copy of a node out of sync may be stale
	}
	var best ReplicaFrame
	var mu sync.Mutex
	var wg sync.WaitGroup
	tctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	for _, n := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := s.cfg.Replication.Transport.Tail(tctx, n, id, epoch, from)
			if err != nil {
				s.cfg.Logger.Warn("takeover: pulling a copy failed", "stream", name, "node", n, "err", err)
				return
			}
			end, err := frameEnd(f)
			if err != nil {
				s.cfg.Logger.Warn("takeover: a pulled copy is malformed", "stream", name, "node", n, "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if slices.Contains(set.InSync, n) && end > bestEnd {
				best, bestEnd, bestNode = f, end, n
			}
		}()
	}
	wg.Wait()
	if bestNode != s.cfg.NodeID {
		if err := s.storeCopy(ctx, id, name, epoch, best); err != nil {
			return err
		}
	}
	if err := s.applyCopy(ctx, st, id, from); err != nil {
		return fmt.Errorf("%w: apply the copy of %s: %v", ErrUnavailable, name, err)
	}
	st.mu.Lock()
	pendingTail := st.next > st.uploaded
	next := st.next
	st.mu.Unlock()
	if pendingTail {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("%w: upload the copy of %s: %v", ErrUnavailable, name, err)
		}
		st.mu.Lock()
		up := st.uploaded
		st.mu.Unlock()
		if up < next {
			return fmt.Errorf("%w: the copy of %s is not uploaded yet; retry", ErrUnavailable, name)
		}
	}
	s.dropReplica(id)
	s.cfg.Logger.Info("adopted a replicated stream", "stream", name, "epoch", epoch, "from", from, "to", next, "copy_of", bestNode)
	return nil
}

// frameEnd is where a frame's entries end.
func frameEnd(f ReplicaFrame) (int64, error) {
	end := f.From
	for _, data := range f.Entries {
		e, err := decodeEntry(data)
		if err != nil {
			return 0, err
		}
		_, n, err := entrySpan(&e, end)
		if err != nil {
			return 0, err
		}
		end = max(end, n)
	}
	return end, nil
}

// copyEnd is where this node's copy of stream id ends (from if none).
func (s *Service) copyEnd(id uint64, from int64) int64 {
	s.replicas.mu.Lock()
	defer s.replicas.mu.Unlock()
	if r := s.replicas.byID[id]; r != nil && len(r.entries) > 0 {
		return max(from, r.entries[len(r.entries)-1].next)
	}
	return from
}

// storeCopy replaces this node's copy of stream id by f (pulled from
// another replica), written to the WAL and fsynced.
func (s *Service) storeCopy(ctx context.Context, id uint64, name string, epoch int64, f ReplicaFrame) error {
	rs := &s.replicas
	rs.mu.Lock()
	r := rs.byID[id]
	if r == nil {
		r = &replica{}
		if rs.byID == nil {
			rs.byID = map[uint64]*replica{}
		}
		rs.byID[id] = r
	}
	r.reset(f.From)
	r.name, r.epoch, r.fromOwner, r.touched = name, max(r.epoch, epoch), true, time.Now()
	var last *wal.Pending
	var buf []byte
	for _, data := range f.Entries {
		e, err := decodeEntry(data)
		if err != nil || e.streamID != id {
			rs.mu.Unlock()
			return fmt.Errorf("%w: pulled copy of %s: %v", ErrUnavailable, name, err)
		}
		base, end, err := entrySpan(&e, r.next)
		if err != nil || base < r.next {
			rs.mu.Unlock()
			return fmt.Errorf("%w: pulled copy of %s overlaps itself at %d", ErrUnavailable, name, base)
		}
		buf = appendReplicaHeader(buf[:0], 0, r.epoch, r.next)
		buf = append(buf, data...)
		p, err := s.log.EnqueueForWait(buf)
		if err != nil {
			rs.mu.Unlock()
			s.fail(err)
			return fmt.Errorf("%w: write-ahead log: %v", ErrUnavailable, err)
		}
		last = p
		if end > base {
			r.entries = append(r.entries, replicaEntry{base: base, next: end, pos: p.Pos()})
		}
		r.next = end
	}
	rs.mu.Unlock()
	if last != nil {
		if err := last.Wait(ctx); err != nil {
			return s.waitError(name, err, ctx)
		}
	}
	return nil
}

// applyCopy applies this node's copy of stream id from offset from on to
// st, as a replay would: chunks pointing at the copy's WAL entries,
// producer state, closure. A hole in the copy (an earlier takeover's gap)
// becomes a gap.
func (s *Service) applyCopy(ctx context.Context, st *streamState, id uint64, from int64) error {
	s.replicas.mu.Lock()
	var ents []replicaEntry
	var last *wal.Pending
	if r := s.replicas.byID[id]; r != nil {
		last = r.last
		for _, e := range r.entries {
			if e.next > from {
				ents = append(ents, e)
			}
		}
	}
	s.replicas.mu.Unlock()
	// This node's own copy may hold lazy entries not yet fdatasync'ed
	// (--replica-sync-interval), which the WAL does not read.
	if err := s.durableCopy(ctx, last); err != nil {
		return err
	}
	for _, re := range ents {
		data, err := s.log.ReadAt(re.pos, nil)
		if err != nil {
			return err
		}
		e, err := decodeEntry(data) // unwraps the replica header
		if err != nil {
			return err
		}
		st.mu.Lock()
		if re.base < st.next {
			st.mu.Unlock()
			continue // already in object storage
		}
		if re.base > st.next {
			st.chunks = append(st.chunks, chunk{base: st.next, next: re.base, gap: true})
			st.next, st.hwm = re.base, re.base
		}
		applied, err := st.replay(re.pos, &e)
		if err == nil && applied {
			st.unflushed += int64(len(data))
			s.pending.Add(int64(len(data)))
		}
		st.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if len(ents) > 0 && s.pendingSince.Load() == 0 {
		s.pendingSince.Store(time.Now().UnixNano())
	}
	return nil
}

// deferReplicated unloads, while Open replays, the replicated streams this
// node owns but cannot serve from its own WAL alone: none of their entries
// survived (a node that lost its disk comes back with an empty WAL) or
// their offsets were never reserved in this epoch (a crash in the middle
// of a takeover). Their first request adopts them again (adopt,
// adoptCopies), from object storage and the in-sync copies; the job
// RunReplication does so at once.
func (s *Service) deferReplicated(written map[uint64]bool) {
	for id, st := range s.byID {
		if !s.replicated(st) || (written[id] && (s.resv == nil || st.res.own)) {
			continue
		}
		delete(s.byID, id)
		delete(s.byName, st.info.Name)
		s.deferred = append(s.deferred, st.info.Name)
	}
}

// adoptDeferred adopts the streams deferReplicated left for later.
func (s *Service) adoptDeferred(ctx context.Context) {
	s.mu.Lock()
	names := s.deferred
	s.deferred = nil
	s.mu.Unlock()
	for _, name := range names {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := s.lookup(actx, name); err != nil {
			s.cfg.Logger.Warn("adopting a replicated stream after the restart failed; its next request retries", "stream", name, "err", err)
		}
		cancel()
	}
}
