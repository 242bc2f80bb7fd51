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
	"github.com/PicoMQ/picomq/sdk/retry"
)

// DurabilityReplicated acknowledges after the owner's WAL fsync and enough
// followers' to make MinInSync copies.
const DurabilityReplicated = "replicated"

// Transport carries replication messages to another node
// (node/replication implements it over the nodes' listeners).
type Transport interface {
	// Dial opens a replication connection to node: one per follower
	// node, kept open, requests pipelined on it.
	Dial(ctx context.Context, node string) (ReplicaConn, error)
	// Tail fences stream id at epoch on node and returns node's copy of
	// it from offset from on (ReplicaTail there).
	Tail(ctx context.Context, node string, id uint64, epoch, from int64) (ReplicaFrame, error)
}

// ReplicaConn is one open replication connection. Send writes one request
// without waiting for its answer; Recv returns the answers in the order
// of the requests (the transport checks their sequence numbers). Send is
// called by one goroutine at a time, Recv by one other; Close may be
// called by any, and makes both fail.
type ReplicaConn interface {
	Send(frames []ReplicaFrame) error
	Recv() ([]ReplicaResult, error)
	Close() error
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
	// Ack is what this node's answer as a follower means (ReplicaAckFsync,
	// the default, or ReplicaAckWrite; docs/durability.md).
	Ack string
}

// What a follower's answer to a replication request means.
const (
	// ReplicaAckFsync: the entries are fdatasync'ed in the follower's WAL.
	ReplicaAckFsync = "fsync"
	// ReplicaAckWrite: the entries are written to the follower's WAL file
	// (its OS page cache); their fdatasync follows in the same WAL commit,
	// after the answer. Kafka's acks=all with its default flush settings.
	ReplicaAckWrite = "write"
)

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

// peer ships to one follower node over one connection, several requests
// in flight (maxInFlight), answered in order.
type peer struct {
	node string
	kick chan struct{} // wakes runPeer: connect, resend, or send
	mu   sync.Mutex
	// queue: entries not sent yet; needs: streams to resend from an
	// offset (-1: from the floor), which only runPeer does (it reads the
	// WAL and may wait for it).
	queue      []shipItem
	queueBytes int // the entries' bytes in queue
	needs      map[*streamState]int64
	conn       ReplicaConn // nil: runPeer (re)connects
	// sending: one goroutine at a time builds and sends requests (an
	// appender when the peer is idle, the answer reader, or runPeer).
	sending  bool
	inFlight []flight // sent on conn, not answered yet, in order
	lastUsed time.Time
}

// flight is one request on the wire.
type flight struct {
	frames  []ReplicaFrame
	streams []*streamState
	sent    time.Time
}

// maxInFlight bounds the requests sent to one follower and not yet
// answered. Two keep a follower's WAL busy (one request in its fsync, one
// queued for its next group); entries that queue meanwhile on the owner
// go out as one request when the first answer frees a slot, which would
// have reached the follower's next group anyway. More only splits the
// same entries into more, smaller requests, each costing a write and a
// read on both sides and a wake-up: at 64 clients 8 gave 4.7 entries per
// request, 4 gave 7-9, 2 gives 12-16, and the owner's CPU per append was
// lower than with 4 in 10 of 14 alternated runs, by 8 % on average (the
// machine's load makes it noisy: docs/benchmarks.md, issue 32).
const maxInFlight = 2

// secondRequestBytes: with one request in flight, a second one goes out
// only once this many bytes of entries are queued (or a resend is
// pending); smaller ones wait for the first answer and go out with what
// queues meanwhile. A follower takes its requests one at a time (it
// answers a lone request from its reading goroutine, after that
// request's fsync), so a small second request would only wait in its
// socket, and cost a request of its own on both sides (a read, a WAL
// commit with its own fdatasync and an answer on the follower). At 64
// clients this gave 40-55 % more entries per request and, with fsync
// acks, 6 to 9 % less CPU per append over the three nodes, the row higher
// in 6 of 7 alternated pairs (docs/benchmarks.md, issue 32). Large ones
// (catch-up, big Kafka batches) still overlap their transfer with the
// first's fsync. One client's appends are unaffected: nothing is in
// flight when its next append comes.
const secondRequestBytes = 64 << 10

// windowOpenLocked reports whether p may send another request now. p.mu
// held.
func (p *peer) windowOpenLocked() bool {
	switch n := len(p.inFlight); {
	case n == 0:
		return true
	case n >= maxInFlight:
		return false
	default:
		return p.queueBytes >= secondRequestBytes || len(p.needs) > 0
	}
}

// peerIdle: a connection unused this long is closed (and reopened on the
// next append); the follower's side closes it after twice as long.
const peerIdle = 60 * time.Second

func (p *peer) push(it shipItem) {
	p.mu.Lock()
	p.queue = append(p.queue, it)
	p.queueBytes += len(it.data)
	p.mu.Unlock()
}

func (p *peer) wake() {
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
	p.wake()
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
// follower and returns them; the caller hands them to sendNow once it has
// released st.mu. st.mu held, so every follower gets a stream's entries
// in WAL order.
func (s *Service) shipLocked(st *streamState, from, end int64, data []byte) []string {
	for _, f := range st.repl.set.Followers {
		s.peerFor(f).push(shipItem{st: st, from: from, end: end, data: data})
	}
	return st.repl.set.Followers
}

// sendNow sends what is queued for the followers from the calling
// goroutine where a peer is idle and connected (no hand-off to its
// goroutine on the way to the wire), and wakes the peer's goroutine
// otherwise.
func (s *Service) sendNow(followers []string) {
	for _, f := range followers {
		s.drive(s.peerFor(f))
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

// runPeer keeps one follower's connection until ctx ends: it dials (with
// the retry policy's backoff while that fails), resends streams whose copy
// there does not continue where the owner's queue does (from the owner's
// WAL), and sends what appenders left queued.
func (s *Service) runPeer(ctx context.Context, p *peer) {
	bo := peerRetry.Backoff()
	idle := time.NewTicker(peerIdle / 4)
	defer idle.Stop()
	defer func() {
		p.mu.Lock()
		c := p.conn
		p.mu.Unlock()
		if c != nil {
			s.connFailed(p, c, ctx.Err())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-idle.C:
			s.closeIdle(p)
			continue
		}
		for ctx.Err() == nil {
			p.mu.Lock()
			work := len(p.queue) > 0 || len(p.needs) > 0
			connected := p.conn != nil
			p.mu.Unlock()
			if !work {
				break
			}
			if !connected {
				if err := s.dialPeer(ctx, p); err != nil {
					s.metrics.replErrors.Inc()
					s.failQueued(p, err)
					if retry.Sleep(ctx, bo.Next()) != nil {
						return
					}
					continue
				}
				bo.Reset()
			}
			if !s.send(p, true) {
				break // another goroutine is sending, or the window is full: its answers drive the rest
			}
		}
	}
}

// peerRetry paces reconnects to a follower that cannot be reached.
var peerRetry = retry.Policy{Initial: 50 * time.Millisecond, Max: time.Second}

// dialPeer opens p's connection and starts reading its answers.
func (s *Service) dialPeer(ctx context.Context, p *peer) error {
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Replication.RequestTimeout)
	c, err := s.cfg.Replication.Transport.Dial(dctx, p.node)
	cancel()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.conn, p.lastUsed = c, time.Now()
	p.mu.Unlock()
	go s.readAnswers(p, c)
	return nil
}

// closeIdle closes p's connection when nothing used it for peerIdle.
func (s *Service) closeIdle(p *peer) {
	p.mu.Lock()
	c := p.conn
	if c == nil || p.sending || len(p.inFlight) > 0 || time.Since(p.lastUsed) < peerIdle {
		p.mu.Unlock()
		return
	}
	p.conn = nil
	p.mu.Unlock()
	_ = c.Close()
}

// failQueued marks the streams queued for p as failed there (their
// waiters then decide without p) and turns them into resends.
func (s *Service) failQueued(p *peer, err error) {
	p.mu.Lock()
	seen := map[*streamState]bool{}
	var streams []*streamState
	for _, it := range p.queue {
		if !seen[it.st] {
			seen[it.st] = true
			streams = append(streams, it.st)
		}
	}
	for st := range p.needs {
		if !seen[st] {
			seen[st] = true
			streams = append(streams, st)
		}
	}
	p.queue, p.queueBytes = nil, 0
	p.mu.Unlock()
	s.peerFailed(p, streams, err)
}

// drive sends p's queue from the calling goroutine if p is connected,
// idle and has no resend pending; otherwise the goroutine that is sending
// (or runPeer) takes it.
func (s *Service) drive(p *peer) {
	p.mu.Lock()
	if p.conn == nil || len(p.needs) > 0 {
		p.mu.Unlock()
		p.wake()
		return
	}
	busy := p.sending || !p.windowOpenLocked() || len(p.queue) == 0
	p.mu.Unlock()
	if !busy {
		s.send(p, false)
	}
}

// send takes the sending token of p and sends requests until the queue is
// empty, the window is full or the connection is gone; resends only with
// withNeeds (runPeer: they may wait for the WAL). It reports false when it
// could not take the token or stopped at a full window.
func (s *Service) send(p *peer, withNeeds bool) bool {
	p.mu.Lock()
	if p.sending {
		p.mu.Unlock()
		return false
	}
	p.sending = true
	for {
		c := p.conn
		if c == nil || !p.windowOpenLocked() || (len(p.needs) > 0 && !withNeeds) ||
			(len(p.queue) == 0 && len(p.needs) == 0) {
			full := !p.windowOpenLocked()
			p.sending = false
			resend := len(p.needs) > 0 && !withNeeds && c != nil
			p.mu.Unlock()
			if resend {
				p.wake()
			}
			return !full
		}
		items, needs := p.queue, p.needs
		p.queue, p.needs, p.queueBytes = nil, nil, 0
		p.mu.Unlock()
		frames, streams := s.buildFrames(p.node, items, needs)
		p.mu.Lock()
		if len(frames) == 0 {
			continue
		}
		if p.conn != c {
			// The connection failed meanwhile: its failure resends
			// what was in flight; these go on the next one.
			s.requeueLocked(p, streams)
			continue
		}
		p.inFlight = append(p.inFlight, flight{frames: frames, streams: streams, sent: time.Now()})
		p.lastUsed = time.Now()
		p.mu.Unlock()
		if err := c.Send(frames); err != nil {
			s.connFailed(p, c, err)
		}
		p.mu.Lock()
	}
}

// requeueLocked asks for a resend of streams on p's next connection.
// p.mu held.
func (s *Service) requeueLocked(p *peer, streams []*streamState) {
	if p.needs == nil {
		p.needs = map[*streamState]int64{}
	}
	for _, st := range streams {
		if _, ok := p.needs[st]; !ok {
			p.needs[st] = -1
		}
	}
}

// readAnswers reads c's answers in order until c fails, applying each to
// the streams of its request and sending what queued meanwhile.
func (s *Service) readAnswers(p *peer, c ReplicaConn) {
	for {
		res, err := c.Recv()
		p.mu.Lock()
		if p.conn != c {
			p.mu.Unlock()
			return // closed (idle, failed or shut down): already handled
		}
		if err == nil && len(p.inFlight) == 0 {
			err = errors.New("an answer to no request")
		}
		var f flight
		if err == nil {
			f = p.inFlight[0]
			if len(res) != len(f.frames) {
				err = fmt.Errorf("%d answers to %d frames", len(res), len(f.frames))
			}
		}
		if err != nil {
			p.mu.Unlock()
			s.connFailed(p, c, err)
			return
		}
		p.inFlight = p.inFlight[1:]
		p.mu.Unlock()
		s.metrics.replSeconds.Observe(time.Since(f.sent).Seconds())
		s.peerAnswered(p, f.frames, f.streams, res)
		s.drive(p)
	}
}

// connFailed closes c if it is still p's connection and fails every
// stream it had in flight (they are resent on the next connection).
func (s *Service) connFailed(p *peer, c ReplicaConn, err error) {
	p.mu.Lock()
	if p.conn != c {
		p.mu.Unlock()
		return
	}
	p.conn = nil
	fl := p.inFlight
	p.inFlight = nil
	p.mu.Unlock()
	_ = c.Close()
	var streams []*streamState
	seen := map[*streamState]bool{}
	for _, f := range fl {
		for _, st := range f.streams {
			if !seen[st] {
				seen[st] = true
				streams = append(streams, st)
			}
		}
	}
	if len(streams) > 0 {
		s.metrics.replErrors.Inc()
		s.peerFailed(p, streams, err)
	}
	p.wake()
}

// buildFrames turns queued items and resend requests into frames;
// streams[i] is frames[i]'s stream.
//
// It allocates its slices once, at their largest size, and the frames'
// Entries share one backing array (each capped at its own part, so that
// adding to one frame's entries copies rather than overwrites the next):
// four allocations per request rather than a few per frame.
func (s *Service) buildFrames(node string, items []shipItem, needs map[*streamState]int64) ([]ReplicaFrame, []*streamState) {
	n := len(needs) + len(items)
	frames := make([]ReplicaFrame, 0, n)
	streams := make([]*streamState, 0, n)
	ends := make([]int64, 0, n) // where each frame's entries end
	backing := make([][]byte, 0, len(items))
	for st, from := range needs {
		if f, ok := s.resendFrame(node, st, from); ok {
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
		var entries [][]byte
		if it.data != nil {
			backing = append(backing, it.data)
			entries = backing[len(backing)-1 : len(backing) : len(backing)]
		}
		frames = append(frames, ReplicaFrame{StreamID: it.st.info.ID, Name: it.st.info.Name, From: it.from, Entries: entries})
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
		synced, wasFailed := rp.syncedLocked(), fs.failed
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
		// Waiters need every in-sync follower: the first of two answers
		// for the same entries cannot release them, so it does not wake
		// them (half the wake-ups at 64 clients).
		if r.Status != ReplicaOK || wasFailed || !slices.Contains(rp.set.InSync, p.node) || rp.syncedLocked() != synced {
			rp.wakeLocked()
		}
		st.mu.Unlock()
	}
}

// syncedLocked is where the copies of every in-sync follower reach: the
// least of their confirmed ends. st.mu held.
func (rp *replState) syncedLocked() int64 {
	least := int64(math.MaxInt64)
	for _, f := range rp.set.InSync {
		if fs := rp.follow[f]; fs == nil {
			return -1
		} else if fs.acked < least {
			least = fs.acked
		}
	}
	return least
}

// shipUploaded tells st's followers that object storage now holds what
// is below its floor, so they release their copies of it.
func (s *Service) shipUploadedLocked(st *streamState) {
	if st.repl == nil || !st.repl.ready {
		return
	}
	s.shipLocked(st, st.next, st.next, nil)
	for _, f := range st.repl.set.Followers {
		s.peerFor(f).wake()
	}
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
		if set, err = s.cachedReplicaSet(ctx, info.ID, info.Epoch); err != nil {
			return nil, nil, err
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

// replicaSetTTL is how long ReplicaNodes reuses a replica set it read from
// etcd for a stream another node owns: Kafka clients ask for Metadata
// often and for many partitions at once, and a set changes only when a
// follower falls behind, catches up or is replaced.
const replicaSetTTL = time.Second

type cachedSet struct {
	set metadata.ReplicaSet
	at  time.Time
}

// cachedReplicaSet is the replica set of stream id at ownership epoch (or
// later), read from etcd at most once per replicaSetTTL. A set not written
// yet in that epoch (followers are chosen at its first append) is not
// kept: it changes within moments.
func (s *Service) cachedReplicaSet(ctx context.Context, id uint64, epoch int64) (metadata.ReplicaSet, error) {
	s.setCacheMu.Lock()
	c, ok := s.setCache[id]
	s.setCacheMu.Unlock()
	if ok && time.Since(c.at) < replicaSetTTL && c.set.Epoch >= epoch {
		return c.set, nil
	}
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return metadata.ReplicaSet{}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	set, err := rsets.ReplicaSet(rctx, id)
	if err != nil {
		return metadata.ReplicaSet{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.metrics.replicaSetReads.Inc()
	if set.Owner == "" || set.Epoch < epoch {
		return set, nil
	}
	s.setCacheMu.Lock()
	if s.setCache == nil || len(s.setCache) > 100000 {
		s.setCache = map[uint64]cachedSet{} // deleted streams' entries go with the rest
	}
	s.setCache[id] = cachedSet{set: set, at: time.Now()}
	s.setCacheMu.Unlock()
	return set, nil
}
