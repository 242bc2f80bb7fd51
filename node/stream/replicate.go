package stream

// The owner side of `replicated` durability (docs/durability.md,
// docs/architecture.md "Visibility: high watermark and last stable
// offset").
//
// An append to a replicated stream is written to the owner's WAL and, in
// the same step under the stream lock, queued for each follower. One
// goroutine per follower node ships what queued while its previous request
// was out, for every stream at once, in one request (the follower fsyncs
// it as one commit group). The append is acknowledged, and the high
// watermark moves past it, once the owner's fsync and every in-sync
// follower's have covered it and the copies number at least the stream's
// minimum: Kafka's acks=all with min.insync.replicas. A follower that does
// not answer within the lag timeout (or whose request failed) is removed
// from the in-sync set in etcd before any append is acknowledged without
// it; one that has caught up with everything written is added back. So
// every in-sync member holds every acknowledged record, and a takeover by
// any of them loses none.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// DurabilityReplicated acknowledges after the owner's WAL fsync and enough
// followers' to make MinInSync copies.
const DurabilityReplicated = "replicated"

// Transport carries replication messages to another node
// (node/replication implements it over the nodes' HTTP listeners).
type Transport interface {
	Replicate(ctx context.Context, node string, frames []ReplicaFrame) ([]ReplicaResult, error)
	// Tail fences stream id at epoch on node and returns node's copy of
	// it from offset from on (ReplicaTail there).
	Tail(ctx context.Context, node string, id uint64, epoch, from int64) (ReplicaFrame, error)
}

// ReplicationConfig configures `replicated` streams.
type ReplicationConfig struct {
	Transport Transport // nil: replicated streams cannot be created
	// Zone is this node's failure-domain label; followers are chosen in
	// other zones first (metadata.Member.Zone).
	Zone string
	// Replicas (R, owner included) and MinInSync (M) are the defaults of
	// a replicated stream that names none.
	Replicas  int
	MinInSync int
	// LagTimeout: an in-sync follower that has not confirmed an append
	// this long after the owner waits for it is removed from the in-sync
	// set (default 1 s).
	LagTimeout time.Duration
	// RequestTimeout bounds one replication request (default 5 s).
	RequestTimeout time.Duration
}

// replState is the owner's replication state of one stream; fields but
// setMu are guarded by streamState.mu.
type replState struct {
	setMu  sync.Mutex // one replica-set load or write at a time
	ready  bool
	set    metadata.ReplicaSet
	follow map[string]*followerState
	wake   chan struct{}
	// fenced: a follower has seen a newer epoch, or the set was written
	// by another owner: this node must not acknowledge anything more.
	fenced error
}

type followerState struct {
	acked   int64 // the follower fsynced offsets below this
	failed  bool  // the last request to it failed
	joining bool  // being added to the in-sync set
}

func (rp *replState) wakeLocked() {
	if rp.wake != nil {
		close(rp.wake)
		rp.wake = nil
	}
}

func (rp *replState) wakeChanLocked() <-chan struct{} {
	if rp.wake == nil {
		rp.wake = make(chan struct{})
	}
	return rp.wake
}

func (rp *replState) followerLocked(node string) *followerState {
	fs := rp.follow[node]
	if fs == nil {
		fs = &followerState{}
		if rp.follow == nil {
			rp.follow = map[string]*followerState{}
		}
		rp.follow[node] = fs
	}
	return fs
}

// shipItem is one WAL entry (or, with no data, a report of the uploaded
// offset) queued for one follower.
type shipItem struct {
	st        *streamState
	from, end int64
	data      []byte
}

// peer ships to one follower node.
type peer struct {
	node  string
	mu    sync.Mutex
	queue []shipItem
	needs map[*streamState]int64 // streams to resend from an offset (-1: from the floor)
	kick  chan struct{}
}

func (p *peer) push(it shipItem) {
	p.mu.Lock()
	p.queue = append(p.queue, it)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *peer) need(st *streamState, from int64) {
	p.mu.Lock()
	if p.needs == nil {
		p.needs = map[*streamState]int64{}
	}
	if cur, ok := p.needs[st]; !ok || from < cur {
		p.needs[st] = from
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// replicated reports whether st's appends wait for followers.
func (s *Service) replicated(st *streamState) bool {
	return s.replicatedRecord(st.info)
}

func (s *Service) replicatedRecord(m metadata.Stream) bool {
	d := m.Durability
	if d == "" {
		d = s.cfg.DefaultDurability
	}
	return d == DurabilityReplicated && s.tier != nil && s.cluster != nil && s.cfg.Replication.Transport != nil
}

// replFactors is the stream's R and M.
func (s *Service) replFactors(m metadata.Stream) (r, minISR int) {
	r, minISR = int(m.Replicas), int(m.MinInSync)
	if r == 0 {
		r = s.cfg.Replication.Replicas
	}
	if minISR == 0 {
		minISR = min(s.cfg.Replication.MinInSync, r)
	}
	return r, minISR
}

func (s *Service) peerFor(node string) *peer {
	s.peersMu.Lock()
	defer s.peersMu.Unlock()
	p := s.peers[node]
	if p == nil {
		p = &peer{node: node, kick: make(chan struct{}, 1)}
		if s.peers == nil {
			s.peers = map[string]*peer{}
		}
		s.peers[node] = p
		go s.runPeer(s.replCtx, p)
	}
	return p
}

// chooseFollowers keeps the live nodes of keep (in order) and adds live
// members until there are n followers: nodes of zones no copy is in yet
// first, then by a rendezvous score of the stream name (so streams spread
// over the cluster and every node picks alike).
func chooseFollowers(name, self, selfZone string, members []metadata.Member, keep []string, n int) []string {
	live := map[string]metadata.Member{}
	for _, m := range members {
		live[m.NodeID] = m
	}
	var out []string
	zones := map[string]bool{selfZone: true}
	for _, k := range keep {
		if m, ok := live[k]; ok && k != self && !slices.Contains(out, k) && len(out) < n {
			out = append(out, k)
			zones[m.Zone] = true
		}
	}
	type cand struct {
		m     metadata.Member
		score uint64
	}
	var cands []cand
	for _, m := range members {
		if m.NodeID == self || slices.Contains(out, m.NodeID) {
			continue
		}
		h := sha256.Sum256([]byte(m.NodeID + "\x00" + name))
		cands = append(cands, cand{m, binary.BigEndian.Uint64(h[:8])})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	for len(out) < n && len(cands) > 0 {
		pick := 0
		for i, c := range cands {
			if !zones[c.m.Zone] {
				pick = i
				break
			}
		}
		out = append(out, cands[pick].m.NodeID)
		zones[cands[pick].m.Zone] = true
		cands = slices.Delete(cands, pick, pick+1)
	}
	return out
}

// ensureRepl loads (or, for a new ownership, writes) st's replica set
// before its first replicated append.
func (s *Service) ensureRepl(ctx context.Context, st *streamState) error {
	st.mu.Lock()
	if st.repl == nil {
		st.repl = &replState{}
	}
	rp := st.repl
	ready := rp.ready
	st.mu.Unlock()
	if ready {
		return nil
	}
	rp.setMu.Lock()
	defer rp.setMu.Unlock()
	st.mu.Lock()
	ready, epoch, clean := rp.ready, st.info.Epoch, st.uploaded >= st.next
	st.mu.Unlock()
	if ready {
		return nil
	}
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return fmt.Errorf("%w: the registry keeps no replica sets", ErrUnavailable)
	}
	set, err := rsets.ReplicaSet(ctx, st.info.ID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if set.Rev == 0 || set.Epoch != epoch || set.Owner != s.cfg.NodeID {
		if set.Epoch > epoch {
			return fmt.Errorf("%w: %s has a newer owner (epoch %d)", ErrUnavailable, st.info.Name, set.Epoch)
		}
		members, err := s.liveMembers(ctx)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		r, _ := s.replFactors(st.info)
		keep := append(slices.Clone(set.InSync), set.Followers...)
		next := metadata.ReplicaSet{Epoch: epoch, Owner: s.cfg.NodeID,
			Followers: chooseFollowers(st.info.Name, s.cfg.NodeID, s.cfg.Replication.Zone, members, keep, r-1)}
		if clean {
			// Everything this owner holds is in object storage: every
			// follower holds all of it, trivially.
			next.InSync = slices.Clone(next.Followers)
		}
		rev, err := rsets.PutReplicaSet(ctx, s.session(), st.info.ID, set.Rev, next)
		if err != nil {
			return fmt.Errorf("%w: write the replica set of %s: %v", ErrUnavailable, st.info.Name, err)
		}
		next.Rev = rev
		set = next
		s.cfg.Logger.Info("replica set", "stream", st.info.Name, "epoch", epoch, "followers", set.Followers, "in_sync", set.InSync)
	}
	st.mu.Lock()
	rp.set, rp.ready = set, true
	for _, f := range set.Followers {
		rp.followerLocked(f)
	}
	st.mu.Unlock()
	for _, f := range set.Followers {
		s.peerFor(f).need(st, -1) // learn where each copy ends
	}
	return nil
}

// shipLocked queues one WAL entry of st (offsets [from, end)) for every
// follower. st.mu held, so every follower gets a stream's entries in WAL
// order.
func (s *Service) shipLocked(st *streamState, from, end int64, data []byte) {
	for _, f := range st.repl.set.Followers {
		s.peerFor(f).push(shipItem{st: st, from: from, end: end, data: data})
	}
}

// checkReplicasLocked refuses an append that cannot make its minimum of
// copies (Kafka checks the in-sync set before it appends, too). st.mu held.
func (s *Service) checkReplicasLocked(st *streamState) error {
	rp := st.repl
	if rp.fenced != nil {
		return rp.fenced
	}
	_, m := s.replFactors(st.info)
	if 1+len(rp.set.InSync) < m {
		return fmt.Errorf("%w: %s has %d in-sync copies (%v and this node), needs %d", ErrNotEnoughReplicas, st.info.Name, 1+len(rp.set.InSync), rp.set.InSync, m)
	}
	return nil
}

// waitReplicated blocks until every in-sync follower confirmed offsets
// below end, removing from the in-sync set (in etcd, first) those that
// fail or lag, and fails with ErrNotEnoughReplicas when fewer than the
// minimum of copies remain.
func (s *Service) waitReplicated(ctx context.Context, st *streamState, end int64) error {
	start := time.Now()
	lag := s.cfg.Replication.LagTimeout
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		s.metrics.replWaitSeconds.Observe(time.Since(start).Seconds())
	}()
	_, minISR := s.replFactors(st.info)
	for {
		st.mu.Lock()
		rp := st.repl
		if rp.fenced != nil {
			err := rp.fenced
			st.mu.Unlock()
			return err
		}
		if st.deleted {
			st.mu.Unlock()
			return fmt.Errorf("%w: %s", ErrNotFound, st.info.Name)
		}
		have, waiting := 1, false
		var lagging []string
		late := time.Since(start) > lag
		for _, f := range rp.set.InSync {
			fs := rp.followerLocked(f)
			switch {
			case fs.acked >= end:
				have++
			case fs.failed || late:
				lagging = append(lagging, f)
			default:
				waiting = true
			}
		}
		for f, fs := range rp.follow {
			if fs.joining && !slices.Contains(rp.set.InSync, f) && fs.acked < end {
				waiting = true // it may be in sync by the time we decide
			}
		}
		wake := rp.wakeChanLocked()
		keep := len(rp.set.InSync) - len(lagging)
		st.mu.Unlock()
		if len(lagging) > 0 && 1+keep < minISR {
			// Removing them would leave fewer than M-1 in-sync
			// followers: they stay in the set (they hold everything
			// acknowledged so far, so a takeover may still pick them:
			// Kafka's eligible leader replicas) and this append fails.
			return fmt.Errorf("%w: %s: followers %v do not confirm, and without them %d copies are left of the %d it needs", ErrNotEnoughReplicas, st.info.Name, lagging, 1+keep, minISR)
		}
		if len(lagging) > 0 {
			if err := s.shrinkISR(ctx, st, lagging); err != nil {
				return err
			}
			continue
		}
		if !waiting {
			if have >= minISR {
				return nil
			}
			return fmt.Errorf("%w: %s has %d of the %d copies it needs", ErrNotEnoughReplicas, st.info.Name, have, minISR)
		}
		if timer == nil {
			timer = time.NewTimer(lag)
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// updateSet writes st's replica set changed by fn (conditioned on the
// node's session and the set's revision). A set written by anyone else
// fences this owner.
func (s *Service) updateSet(ctx context.Context, st *streamState, why string, fn func(*metadata.ReplicaSet) bool) error {
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return fmt.Errorf("%w: the registry keeps no replica sets", ErrUnavailable)
	}
	rp := st.repl
	rp.setMu.Lock()
	defer rp.setMu.Unlock()
	st.mu.Lock()
	next := rp.set
	next.Followers, next.InSync = slices.Clone(next.Followers), slices.Clone(next.InSync)
	st.mu.Unlock()
	if !fn(&next) {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), routeTimeout)
	defer cancel()
	rev, err := rsets.PutReplicaSet(wctx, s.session(), st.info.ID, next.Rev, next)
	if err != nil {
		err = fmt.Errorf("%w: %s: %s: %v", ErrUnavailable, st.info.Name, why, err)
		if errors.Is(err, metadata.ErrConflict) || errors.Is(err, metadata.ErrLeaseLost) {
			st.mu.Lock()
			rp.fenced = err
			rp.wakeLocked()
			st.mu.Unlock()
		}
		return err
	}
	next.Rev = rev
	st.mu.Lock()
	rp.set = next
	rp.wakeLocked()
	st.mu.Unlock()
	s.metrics.isrChanges.Inc()
	s.cfg.Logger.Info("replica set changed", "stream", st.info.Name, "why", why, "followers", next.Followers, "in_sync", next.InSync)
	return nil
}

func (s *Service) shrinkISR(ctx context.Context, st *streamState, out []string) error {
	return s.updateSet(ctx, st, fmt.Sprintf("%v fell behind", out), func(set *metadata.ReplicaSet) bool {
		n := len(set.InSync)
		set.InSync = slices.DeleteFunc(set.InSync, func(f string) bool { return slices.Contains(out, f) })
		return len(set.InSync) != n
	})
}

// growISR adds a follower that holds everything written to the in-sync set.
func (s *Service) growISR(st *streamState, node string) {
	err := s.updateSet(s.replCtx, st, node+" caught up", func(set *metadata.ReplicaSet) bool {
		if slices.Contains(set.InSync, node) || !slices.Contains(set.Followers, node) {
			return false
		}
		set.InSync = append(set.InSync, node)
		return true
	})
	st.mu.Lock()
	st.repl.followerLocked(node).joining = false
	st.repl.wakeLocked()
	st.mu.Unlock()
	if err != nil {
		s.cfg.Logger.Warn("adding a follower to the in-sync set failed", "stream", st.info.Name, "node", node, "err", err)
	}
}

// floorLocked is the offset below which a follower needs nothing: what
// object storage holds, and a gap after it. st.mu held.
func floorLocked(st *streamState) int64 {
	floor := st.uploaded
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > floor })
	for ; i < len(st.chunks) && st.chunks[i].gap; i++ {
		floor = st.chunks[i].next
	}
	return floor
}

// runPeer ships to one follower until ctx ends: everything queued since
// the last request, for all streams, in one request; streams whose copy
// there does not continue where the owner's queue does are resent from
// the owner's WAL.
func (s *Service) runPeer(ctx context.Context, p *peer) {
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		for ctx.Err() == nil {
			frames, streams := s.buildFrames(p)
			if len(frames) == 0 {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, s.cfg.Replication.RequestTimeout)
			start := time.Now()
			res, err := s.cfg.Replication.Transport.Replicate(rctx, p.node, frames)
			cancel()
			if err == nil && len(res) != len(frames) {
				err = fmt.Errorf("%d answers to %d frames", len(res), len(frames))
			}
			if err != nil {
				s.metrics.replErrors.Inc()
				s.peerFailed(p, streams, err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			s.metrics.replSeconds.Observe(time.Since(start).Seconds())
			s.peerAnswered(p, frames, streams, res)
		}
	}
}

// buildFrames takes p's queue and resend requests and turns them into
// frames; streams[i] is frames[i]'s stream.
func (s *Service) buildFrames(p *peer) ([]ReplicaFrame, []*streamState) {
	p.mu.Lock()
	items, needs := p.queue, p.needs
	p.queue, p.needs = nil, nil
	p.mu.Unlock()
	var frames []ReplicaFrame
	var streams []*streamState
	var ends []int64 // where each frame's entries end
	for st, from := range needs {
		if f, ok := s.resendFrame(p.node, st, from); ok {
			frames, streams, ends = append(frames, f), append(streams, st), append(ends, math.MaxInt64)
		}
	}
	for _, it := range items {
		if _, ok := needs[it.st]; ok {
			continue // the resend read everything queued before it
		}
		k := len(frames) - 1
		for ; k >= 0 && streams[k] != it.st; k-- {
		}
		if k >= 0 && ends[k] == it.from {
			// Consecutive entries of one stream: one frame.
			frames[k].Entries = appendNonNil(frames[k].Entries, it.data)
			ends[k] = it.end
			continue
		}
		frames = append(frames, ReplicaFrame{StreamID: it.st.info.ID, Name: it.st.info.Name, From: it.from, Entries: appendNonNil(nil, it.data)})
		streams, ends = append(streams, it.st), append(ends, it.end)
	}
	for i, st := range streams {
		st.mu.Lock()
		frames[i].Epoch = st.info.Epoch
		frames[i].Uploaded = floorLocked(st)
		st.mu.Unlock()
	}
	return frames, streams
}

func appendNonNil(dst [][]byte, b []byte) [][]byte {
	if b == nil {
		return dst
	}
	return append(dst, b)
}

// resendFrame reads st's un-uploaded WAL entries from offset from (-1:
// from the floor) for node, which must still be one of its followers.
func (s *Service) resendFrame(node string, st *streamState, from int64) (ReplicaFrame, bool) {
	st.mu.Lock()
	if st.deleted || st.repl == nil || !slices.Contains(st.repl.set.Followers, node) {
		st.mu.Unlock()
		return ReplicaFrame{}, false
	}
	floor := floorLocked(st)
	from = max(from, floor)
	f := ReplicaFrame{StreamID: st.info.ID, Name: st.info.Name, Epoch: st.info.Epoch, Uploaded: floor, From: from}
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > from })
	var refs []chunk
	for ; i < len(st.chunks); i++ {
		if c := st.chunks[i]; c.obj == nil && !c.gap {
			refs = append(refs, c)
		}
	}
	if from > st.next {
		f.From = st.next // the copy is ahead of this owner: truncate it
	}
	last := st.lastPending
	st.mu.Unlock()
	if last != nil && len(refs) > 0 {
		// Only durable WAL records can be read back: wait for the newest
		// (they complete in order).
		ctx, cancel := context.WithTimeout(s.replCtx, s.cfg.Replication.RequestTimeout)
		err := last.Wait(ctx)
		cancel()
		if err != nil {
			s.peerFor(node).need(st, from)
			return ReplicaFrame{}, false
		}
	}
	for _, c := range refs {
		data, err := s.log.ReadAt(c.pos, nil)
		if err != nil {
			s.cfg.Logger.Warn("replication: reading the WAL for a resend failed", "stream", st.info.Name, "err", err)
			s.peerFor(node).need(st, from) // retried with the next round
			return ReplicaFrame{}, false
		}
		if len(data) > 0 && data[0] == replicaEntryVersion {
			_, _, _, data, _ = parseReplicaEntry(data)
		}
		f.Entries = append(f.Entries, data)
	}
	s.metrics.replResends.Inc()
	return f, true
}

func (s *Service) peerFailed(p *peer, streams []*streamState, err error) {
	for _, st := range streams {
		st.mu.Lock()
		if st.repl != nil {
			fs := st.repl.followerLocked(p.node)
			first := !fs.failed
			fs.failed = true
			st.repl.wakeLocked()
			if first {
				s.cfg.Logger.Warn("replication to a follower failed", "stream", st.info.Name, "node", p.node, "err", err)
			}
			p.need(st, fs.acked)
		}
		st.mu.Unlock()
	}
}

func (s *Service) peerAnswered(p *peer, frames []ReplicaFrame, streams []*streamState, res []ReplicaResult) {
	for i, st := range streams {
		r := res[i]
		st.mu.Lock()
		rp := st.repl
		if rp == nil {
			st.mu.Unlock()
			continue
		}
		fs := rp.followerLocked(p.node)
		switch r.Status {
		case ReplicaOK:
			fs.failed = false
			fs.acked = r.Next // the follower's copy ends there
			if !slices.Contains(rp.set.InSync, p.node) && !fs.joining && fs.acked >= st.next && slices.Contains(rp.set.Followers, p.node) {
				fs.joining = true
				go s.growISR(st, p.node)
			}
		case ReplicaNeed:
			fs.acked = min(fs.acked, max(r.Next, 0))
			p.need(st, r.Next)
		case ReplicaFenced:
			if rp.fenced == nil {
				rp.fenced = fmt.Errorf("%w: %s: node %s has seen epoch %d, this owner is at %d", ErrUnavailable, st.info.Name, p.node, r.Epoch, frames[i].Epoch)
				s.cfg.Logger.Warn("replicated stream fenced by a newer owner", "stream", st.info.Name, "node", p.node, "epoch", r.Epoch)
			}
		default:
			fs.failed = true
			p.need(st, fs.acked)
		}
		rp.wakeLocked()
		st.mu.Unlock()
	}
}

// shipUploaded tells st's followers that object storage now holds what
// is below its floor, so they release their copies of it.
func (s *Service) shipUploadedLocked(st *streamState) {
	if st.repl == nil || !st.repl.ready {
		return
	}
	s.shipLocked(st, st.next, st.next, nil)
}

// repairReplicas replaces the followers of this node's replicated streams
// that are no longer live members, and drops them from the in-sync set.
func (s *Service) repairReplicas(ctx context.Context) {
	members, err := s.liveMembers(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, m := range members {
		live[m.NodeID] = true
	}
	for _, st := range s.loaded() {
		st.mu.Lock()
		rp := st.repl
		if rp == nil || !rp.ready || rp.fenced != nil || st.deleted {
			st.mu.Unlock()
			continue
		}
		set := rp.set
		var probe []string
		for _, f := range set.Followers {
			if fs := rp.followerLocked(f); !slices.Contains(set.InSync, f) && !fs.joining && live[f] {
				probe = append(probe, f)
			}
		}
		st.mu.Unlock()
		for _, f := range probe {
			// A follower out of sync gets what it misses even while no
			// append flows (appends may be refused for want of copies).
			s.peerFor(f).need(st, -1)
		}
		r, _ := s.replFactors(st.info)
		dead := slices.ContainsFunc(set.Followers, func(f string) bool { return !live[f] })
		if !dead && len(set.Followers) >= min(r-1, len(members)-1) {
			continue
		}
		var added []string
		_, minISR := s.replFactors(st.info)
		err := s.updateSet(ctx, st, "follower repair", func(next *metadata.ReplicaSet) bool {
			inSync := slices.DeleteFunc(slices.Clone(next.InSync), func(f string) bool { return !live[f] })
			if 1+len(inSync) < minISR && len(inSync) < len(next.InSync) {
				// A dead in-sync follower holds acknowledged records no
				// live one may hold: keep it (and its place) until it
				// returns or enough others are in sync.
				return false
			}
			next.InSync = inSync
			keep := slices.DeleteFunc(slices.Clone(next.Followers), func(f string) bool { return !live[f] })
			next.Followers = chooseFollowers(st.info.Name, s.cfg.NodeID, s.cfg.Replication.Zone, members, keep, r-1)
			for _, f := range next.Followers {
				if !slices.Contains(keep, f) {
					added = append(added, f)
				}
			}
			return len(added) > 0 || len(keep) != len(set.Followers)
		})
		if err != nil {
			continue
		}
		st.mu.Lock()
		for _, f := range added {
			st.repl.follow[f] = &followerState{}
		}
		st.mu.Unlock()
		for _, f := range added {
			s.peerFor(f).need(st, -1) // a new follower catches up from the WAL; object storage has the rest
		}
	}
}

// RunReplication is the replication housekeeping job: follower repair for
// the streams this node owns, and collection of copies nobody needs.
func (s *Service) RunReplication(ctx context.Context) error {
	if s.cfg.Replication.Transport == nil {
		<-ctx.Done()
		return nil
	}
	s.adoptDeferred(ctx)
	every(ctx, 2*time.Second, func(ctx context.Context) {
		s.repairReplicas(ctx)
		s.collectReplicas(ctx)
	})
	return nil
}

// ReplicaNodes returns where a stream's copies are: its owner and its
// followers (replicas), and the owner and the followers in sync (inSync),
// as its replica set in etcd says (or this node's view, if it is the
// owner). A stream that is not replicated has one copy, its owner's.
// The Kafka frontend reports them in Metadata.
func (s *Service) ReplicaNodes(ctx context.Context, info Info) (replicas, inSync []string, err error) {
	m := metadata.Stream{Durability: info.Durability}
	if !s.replicatedRecord(m) {
		return []string{info.Owner}, []string{info.Owner}, nil
	}
	var set metadata.ReplicaSet
	if st := s.local(info.Name); st != nil && st.info.ID == info.ID {
		st.mu.Lock()
		if st.repl != nil && st.repl.ready {
			set = st.repl.set
		}
		st.mu.Unlock()
	}
	if set.Owner == "" {
		rsets, ok := s.reg.(ReplicaSets)
		if !ok {
			return []string{info.Owner}, []string{info.Owner}, nil
		}
		rctx, cancel := context.WithTimeout(ctx, routeTimeout)
		defer cancel()
		if set, err = rsets.ReplicaSet(rctx, info.ID); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	if set.Owner == "" || set.Epoch < info.Epoch {
		// Nothing replicated yet in this ownership: its followers are
		// chosen at its first append.
		return []string{info.Owner}, []string{info.Owner}, nil
	}
	replicas = append([]string{set.Owner}, set.Followers...)
	inSync = append([]string{set.Owner}, set.InSync...)
	return replicas, inSync, nil
}
