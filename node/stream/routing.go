package stream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// ErrRedirect: the stream is served by another node; errors.As gives
// *RedirectError with its URL. Frontends answer 307 to the same path there.
var ErrRedirect = errors.New("stream: owned by another node")

// ErrProtocolMismatch: the stream is served by a node whose HTTP listener
// speaks another protocol than this one (a mixed Pico / Durable Streams
// cluster). A 307 would keep the protocol's path and land on a 404, so the
// HTTP frontends answer an error naming both protocols instead; the error
// still matches ErrRedirect, so the Kafka frontend, which every node
// serves alike, routes as before.
var ErrProtocolMismatch = errors.New("stream: owned by a node of another protocol")

// RedirectError names the node that serves a stream.
type RedirectError struct {
	Name     string
	NodeID   string
	URL      string // the node's advertise URL, no trailing slash
	Protocol string // the node's HTTP protocol ("" if it did not say)
	Self     string // this node's HTTP protocol ("" if not configured)

	stream metadata.Stream // the registry record routing decided on
}

func (e *RedirectError) Error() string {
	if e.Mismatch() {
		return fmt.Sprintf("%v: %s is served by node %s (%s), whose HTTP listener speaks %s; this node speaks %s, and HTTP requests are not routed between protocols: send it to a %s node (docs/durable-streams.md#mixed-protocol-clusters)",
			ErrProtocolMismatch, e.Name, e.NodeID, e.URL, e.Protocol, e.Self, e.Protocol)
	}
	return fmt.Sprintf("%v: %s is served by %s (%s)", ErrRedirect, e.Name, e.NodeID, e.URL)
}

// MovingError: the stream is being handed to another node (a drain or a
// hand-over): its appends pause for as long as the flush and the registry
// update take, then requests are redirected. It is ErrUnavailable (retry);
// the Kafka frontend, whose clients learn a new leader only from a
// rate-limited metadata refresh, waits it out instead.
type MovingError struct{ Name string }

func (e *MovingError) Error() string {
	return fmt.Sprintf("%v: %s is moving to another node; retry", ErrUnavailable, e.Name)
}

func (e *MovingError) Unwrap() error { return ErrUnavailable }

// Mismatch reports whether the serving node speaks another HTTP protocol.
func (e *RedirectError) Mismatch() bool {
	return e.Protocol != "" && e.Self != "" && e.Protocol != e.Self
}

func (e *RedirectError) Unwrap() []error {
	if e.Mismatch() {
		return []error{ErrProtocolMismatch, ErrRedirect}
	}
	return []error{ErrRedirect}
}

// Cluster is what routing needs from the registry beyond Registry.
type Cluster interface {
	Members(ctx context.Context) ([]metadata.Member, error)
	UpdateStream(ctx context.Context, name string, fn func(*metadata.Stream) error) (metadata.Stream, error)
	TakeOver(ctx context.Context, m metadata.Stream, node string) (metadata.Stream, error)
}

// routeTimeout bounds the registry calls of one routing decision: a client
// gets a clear 503 instead of hanging when etcd is unreachable.
const routeTimeout = 3 * time.Second

// membersTTL is how long a membership listing is reused. Ownership itself is
// never taken from a cache: claims are compare-and-swap transactions.
const membersTTL = 300 * time.Millisecond

type routing struct {
	mu         sync.Mutex
	members    []metadata.Member
	membersAt  time.Time
	inflight   map[string]*claimCall // per stream name: one claim at a time
	manifests  []metadata.Manifest
	manifestAt time.Time
	listing    *listing // in-flight manifest listing, shared by concurrent claims
	// indexed groups the entries of the listing indexedOf by stream, for
	// history reads of other nodes' streams: built once per listing, not
	// once per page (a catch-up reads many pages within one listing's
	// lifetime, and the listing holds every stream's manifests).
	indexed   map[uint64][]piece
	indexedOf *metadata.Manifest // first element of the listing indexed
}

type listing struct {
	started time.Time
	done    chan struct{}
	ms      []metadata.Manifest
	err     error
}

type claimCall struct {
	done chan struct{}
	st   *streamState
	err  error
}

func (s *Service) liveMembers(ctx context.Context) ([]metadata.Member, error) {
	s.routing.mu.Lock()
	if time.Since(s.routing.membersAt) < membersTTL {
		ms := s.routing.members
		s.routing.mu.Unlock()
		return ms, nil
	}
	s.routing.mu.Unlock()
	ms, err := s.cluster.Members(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].NodeID < ms[j].NodeID })
	s.routing.mu.Lock()
	s.routing.members, s.routing.membersAt = ms, time.Now()
	s.routing.mu.Unlock()
	return ms, nil
}

// placement picks the node that should take over a stream whose owner is
// gone: rendezvous hashing over the live members, so orphaned streams spread
// evenly and every node computes the same answer without talking.
func placement(name string, members []metadata.Member) metadata.Member {
	var best metadata.Member
	var bestScore uint64
	for _, m := range members {
		// SHA-256 mixes every input bit into the score; FNV alone left
		// near-identical node ids with the same winner for most names.
		h := sha256.New()
		h.Write([]byte(m.NodeID))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if sc := binary.BigEndian.Uint64(h.Sum(nil)); best.NodeID == "" || sc > bestScore {
			best, bestScore = m, sc
		}
	}
	return best
}

// route resolves a stream this node has no local state for.
func (s *Service) route(ctx context.Context, name string) (*streamState, error) {
	if s.cluster == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	m, err := s.reg.GetStream(rctx, name)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: registry unreachable: %v", ErrUnavailable, err)
	}
	if m.Owner == s.cfg.NodeID {
		return s.claim(rctx, m, false)
	}
	members, err := s.liveMembers(rctx)
	if err != nil {
		return nil, fmt.Errorf("%w: registry unreachable: %v", ErrUnavailable, err)
	}
	for _, mb := range members {
		if mb.NodeID == m.Owner {
			return nil, &RedirectError{Name: name, NodeID: mb.NodeID, URL: mb.AdvertiseURL, Protocol: mb.Protocol, Self: s.cfg.Protocol, stream: m}
		}
	}
	// The owner's lease is gone. The placement target claims it; anyone
	// else redirects there, so a stream is never claimed twice at once.
	// A replicated stream goes only to a live in-sync follower, which
	// holds every acknowledged record.
	candidates, err := s.takeoverCandidates(rctx, m, members)
	if err != nil {
		return nil, err
	}
	target := placement(name, candidates)
	if target.NodeID == "" {
		return nil, fmt.Errorf("%w: no live node can take over %s", ErrUnavailable, name)
	}
	if target.NodeID != s.cfg.NodeID {
		return nil, &RedirectError{Name: name, NodeID: target.NodeID, URL: target.AdvertiseURL, Protocol: target.Protocol, Self: s.cfg.Protocol, stream: m}
	}
	return s.claim(rctx, m, true)
}

// claim takes ownership of m (bumping its epoch, conditioned on the record
// not having changed) when takeover is set, then rebuilds the stream's state
// from object storage. Concurrent requests for one stream share one claim.
func (s *Service) claim(ctx context.Context, m metadata.Stream, takeover bool) (*streamState, error) {
	s.routing.mu.Lock()
	if c, ok := s.routing.inflight[m.Name]; ok {
		s.routing.mu.Unlock()
		select {
		case <-c.done:
			return c.st, c.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: claim of %s in progress", ErrUnavailable, m.Name)
		}
	}
	if s.routing.inflight == nil {
		s.routing.inflight = map[string]*claimCall{}
	}
	c := &claimCall{done: make(chan struct{})}
	s.routing.inflight[m.Name] = c
	s.routing.mu.Unlock()

	c.st, c.err = s.doClaim(ctx, m, takeover)

	s.routing.mu.Lock()
	delete(s.routing.inflight, m.Name)
	s.routing.mu.Unlock()
	close(c.done)
	return c.st, c.err
}

func (s *Service) doClaim(ctx context.Context, m metadata.Stream, takeover bool) (*streamState, error) {
	start := time.Now()
	if takeover {
		prevOwner := m.Owner
		// The registry refuses while the previous owner is a member (our
		// view of the membership may be stale): see meta.TakeOver.
		updated, err := s.cluster.TakeOver(ctx, m, s.cfg.NodeID)
		if err != nil {
			if errors.Is(err, metadata.ErrConflict) || errors.Is(err, metadata.ErrNotFound) {
				// Someone else won, the owner is back, or it was
				// deleted: route again.
				return nil, fmt.Errorf("%w: ownership of %s changed; retry", ErrUnavailable, m.Name)
			}
			return nil, fmt.Errorf("%w: claim %s: %v", ErrUnavailable, m.Name, err)
		}
		m = updated
		s.cfg.Logger.Info("took over stream", "stream", m.Name, "from", prevOwner, "epoch", m.Epoch)
	}
	st, err := s.adopt(ctx, m)
	if err != nil {
		return nil, err
	}
	s.metrics.claims.Inc()
	s.metrics.claimSeconds.Observe(time.Since(start).Seconds())
	return st, nil
}

// adopt builds local state for a stream this node owns but has not loaded:
// everything it holds is in object storage (a drained or dead previous
// owner), so the manifests are the whole truth.
func (s *Service) adopt(ctx context.Context, m metadata.Stream) (*streamState, error) {
	// The listing must start after ownership came here: a cached one could
	// miss the previous owner's last flush (a drain's, say) and lose data.
	ms, err := s.manifestsSince(ctx, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: load manifests: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	if st := s.localLocked(m.Name); st != nil && st.info.ID == m.ID {
		s.mu.Unlock()
		return st, nil
	}
	st := s.insertLocked(m)
	// Locked before anyone can find it (s.mu then st.mu, the usual
	// order): a request that finds the stream in the maps waits for it to
	// be built instead of appending to an empty state.
	st.mu.Lock()
	replicated := s.replicatedRecord(m)
	if replicated {
		st.moving = true // no append until the copies are in (adoptCopies)
	}
	s.mu.Unlock()
	defer st.mu.Unlock()
	// abandon drops a half-built stream: an append already waiting for it
	// gets a retryable "moving" answer and is routed afresh next time,
	// never appending at offsets the reservation below was to move past.
	abandon := func() {
		st.moving = true
		s.unloadLocked(st)
	}
	if err := st.applyPieces(indexManifests(ms)[m.ID]); err != nil {
		abandon()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if replicated {
		st.mu.Unlock()
		err := s.adoptCopies(ctx, st)
		st.mu.Lock()
		st.moving = false
		if err != nil {
			abandon()
			return nil, err
		}
	}
	st.floorAtStartLocked()
	if s.resv != nil {
		// Read after the claim: the previous owner, whose session is
		// over, can no longer extend it.
		res, err := s.resv.Reservation(ctx, m.ID)
		if err != nil {
			abandon()
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		st.startReservation(s.lostDisk(res))
	}
	if st.gapTailLocked() {
		s.requestFlush(true) // record the gap in object storage (snapshotFlush)
	}
	return st, nil
}

// manifestsSince lists manifests with a listing that started at or after
// since, sharing one listing between the claims of a burst (a node death
// orphans many streams at once). The listing runs under its own deadline
// (listTimeout), not the caller's: a caller that gives up (a history read
// bounded by routeTimeout) leaves it running for the next, so a listing
// that takes longer than one request's patience (thousands of manifests
// on a loaded node) still completes and is shared, instead of being
// cancelled and restarted by every request forever.
func (s *Service) manifestsSince(ctx context.Context, since time.Time) ([]metadata.Manifest, error) {
	if s.tcfg.Manifests == nil {
		return nil, nil
	}
	for {
		s.routing.mu.Lock()
		l := s.routing.listing
		if l == nil {
			l = &listing{started: time.Now(), done: make(chan struct{})}
			s.routing.listing = l
			if !s.bg.Go(func(bctx context.Context) { s.list(bctx, l) }) {
				s.routing.listing = nil
				s.routing.mu.Unlock()
				return nil, fmt.Errorf("%w: the service is closing", ErrUnavailable)
			}
		}
		s.routing.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !l.started.Before(since) {
			return l.ms, l.err
		}
	}
}

// listTimeout bounds one shared manifest listing.
const listTimeout = time.Minute

func (s *Service) list(ctx context.Context, l *listing) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	l.ms, l.err = s.tcfg.Manifests.Manifests(ctx)
	s.routing.mu.Lock()
	s.routing.listing = nil
	if l.err == nil {
		s.routing.manifests, s.routing.manifestAt = l.ms, l.started
	}
	s.routing.mu.Unlock()
	close(l.done)
}

// manifestsFresh lists manifests for reads of history: a listing up to
// maxAge old is fine there (at worst the read is redirected, or retried
// with a fresh one).
func (s *Service) manifestsFresh(ctx context.Context, maxAge time.Duration) ([]metadata.Manifest, error) {
	s.routing.mu.Lock()
	if s.routing.manifests != nil && time.Since(s.routing.manifestAt) < maxAge {
		ms := s.routing.manifests
		s.routing.mu.Unlock()
		return ms, nil
	}
	s.routing.mu.Unlock()
	// A listing in flight that started within maxAge is fresh enough: wait
	// for it rather than start another behind it.
	return s.manifestsSince(ctx, time.Now().Add(-maxAge))
}

// retire drops a stream's local state for good (deleted, or served by
// another node now): live reads and waiting appends wake, see it gone, and
// the next request is routed afresh.
func (s *Service) retire(st *streamState) {
	s.unload(st)
	st.mu.Lock()
	st.deleted = true
	// Its unflushed bytes will never be flushed here: they leave the
	// node's pending count (and the seal-size trigger) now.
	s.pending.Add(-st.unflushed)
	st.unflushed = 0
	st.wakeReadersLocked()
	st.wakeUploadWaitersLocked()
	st.mu.Unlock()
}

// wakeReadersLocked wakes everything waiting for the high watermark.
func (st *streamState) wakeReadersLocked() {
	if st.wake != nil { // nobody waits otherwise: no channel per append
		close(st.wake)
		st.wake = nil
	}
}

// wakeChanLocked is the channel the next wakeReadersLocked closes, made
// when the first waiter asks for it.
func (st *streamState) wakeChanLocked() <-chan struct{} {
	if st.wake == nil {
		st.wake = make(chan struct{})
	}
	return st.wake
}

// uploadedChangedLocked is wakeChanLocked for the uploaded watermark: an
// idle stream holds neither channel.
func (st *streamState) uploadedChangedLocked() <-chan struct{} {
	if st.upWake == nil {
		st.upWake = make(chan struct{})
	}
	return st.upWake
}

// wakeUploadWaitersLocked wakes appends waiting for object durability.
func (st *streamState) wakeUploadWaitersLocked() {
	if st.upWake != nil {
		close(st.upWake)
		st.upWake = nil
	}
}

// unloadLocked is unload for a caller holding st.mu: s.mu is taken only
// with st.mu released (truncateWAL holds s.mu while it takes each st.mu;
// the other order deadlocked every lookup of a node whose replicated
// adopt failed during an object-storage fault).
func (s *Service) unloadLocked(st *streamState) {
	st.mu.Unlock()
	s.unload(st)
	st.mu.Lock()
}

// unload drops a stream's local state (ownership moved away).
func (s *Service) unload(st *streamState) {
	s.mu.Lock()
	if s.byName[st.info.Name] == st {
		delete(s.byName, st.info.Name)
	}
	if s.byID[st.info.ID] == st {
		delete(s.byID, st.info.ID)
	}
	s.mu.Unlock()
}

// infoFromMeta describes a stream this node does not serve.
func infoFromMeta(m metadata.Stream) Info {
	return Info{Name: m.Name, ID: m.ID, ContentType: m.ContentType, CreatedAt: m.CreatedAt, Owner: m.Owner, Epoch: m.Epoch,
		StartOffset: m.StartOffset, KafkaTopic: m.KafkaTopic, RetentionMs: m.RetentionMs, RetentionBytes: m.RetentionBytes, MaxBatchBytes: m.MaxBatchBytes, LogAppendTime: m.LogAppendTime,
		Durability: m.Durability, Replicas: int(m.Replicas), MinInSync: int(m.MinInSync), Compaction: compactionFromMeta(m.Compaction)}
}

// readRemote serves a read of a stream owned by another node when the
// offset is already in object storage: a history read needs no redirect.
// ok=false means the offset is not uploaded yet (the caller redirects).
func (s *Service) readRemote(ctx context.Context, m metadata.Stream, opts ReadOptions) (ReadResult, bool, error) {
	if s.tier == nil || s.tcfg.Manifests == nil {
		return ReadResult{}, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	if opts.Offset < m.StartOffset {
		return ReadResult{}, false, nil // the owner answers trims
	}
	ms, err := s.manifestsFresh(rctx, 200*time.Millisecond)
	if err != nil {
		return ReadResult{}, false, nil
	}
	view := &streamState{info: m}
	if m.Fork != nil {
		// A fork's own records start at its fork point; below it are
		// its source's, which readView stitches in. Without this, the
		// inherited range looked like a gap and was skipped.
		view.next, view.hwm, view.uploaded = m.Fork.End, m.Fork.End, m.Fork.End
	}
	if err := view.applyPieces(s.remotePieces(ms, m.ID)); err != nil {
		// The owner may still serve it from memory; say why this node
		// cannot, or the redirect hides a broken manifest set.
		s.cfg.Logger.Warn("history read: cannot build the stream's view from its manifests; redirecting", "stream", m.Name, "err", err)
		return ReadResult{}, false, nil
	}
	if opts.Offset >= view.uploaded {
		return ReadResult{}, false, nil
	}
	if m.Fork != nil {
		res, err := s.readView(ctx, view, opts)
		if err != nil {
			// The source's history may not be in object storage yet
			// (or its view cannot be built): the owner serves it.
			return ReadResult{}, false, nil
		}
		res.UpToDate, res.Closed = false, false
		res.ServedRemotely = true
		return res, true, nil
	}
	res, err := s.readState(ctx, view, opts)
	if err != nil {
		return ReadResult{}, true, err
	}
	// The owner may hold more than object storage: never claim the end.
	res.UpToDate, res.Closed = false, false
	res.ServedRemotely = true
	return res, true, nil
}

// remotePieces returns the manifest entries of stream id in the listing
// ms, indexing the listing on its first use. The result is the caller's
// (applyPieces sorts it).
func (s *Service) remotePieces(ms []metadata.Manifest, id uint64) []piece {
	if len(ms) == 0 {
		return nil
	}
	s.routing.mu.Lock()
	defer s.routing.mu.Unlock()
	if s.routing.indexedOf != &ms[0] {
		s.routing.indexed, s.routing.indexedOf = indexManifests(ms), &ms[0]
	}
	return slices.Clone(s.routing.indexed[id])
}

// Drain hands every stream this node owns to other live nodes: appends to a
// stream pause (503), everything is flushed to object storage with its
// producer state, then ownership moves with epoch+1 and the stream is
// unloaded, so later requests are redirected to the new owner. No
// acknowledged record is lost: all of them are in object storage before the
// new owner can accept anything. It returns the number of streams moved.
func (s *Service) Drain(ctx context.Context) (int, error) {
	if s.cluster == nil || s.tier == nil {
		return 0, fmt.Errorf("%w: draining needs a cluster and object storage", ErrUnavailable)
	}
	s.routing.mu.Lock()
	s.routing.membersAt = time.Time{} // fresh membership for placement
	s.routing.mu.Unlock()
	members, err := s.liveMembers(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var others []metadata.Member
	for _, m := range members {
		if m.NodeID != s.cfg.NodeID {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return 0, fmt.Errorf("%w: no other live node to hand streams to", ErrUnavailable)
	}
	s.buildAll()
	streams := s.loaded()
	for _, st := range streams {
		st.mu.Lock()
		st.moving = true
		st.mu.Unlock()
	}
	release := func() {
		for _, st := range streams {
			st.mu.Lock()
			st.moving = false
			st.mu.Unlock()
		}
	}
	if err := s.Flush(ctx); err != nil {
		release()
		return 0, fmt.Errorf("drain: flush: %w", err)
	}
	if s.resv != nil {
		// Everything handed out is uploaded and appends are paused: end
		// each reservation at the stream's end, so the next owner
		// continues without a gap. If this fails it leaves one.
		for rest := streams; len(rest) > 0; {
			n := min(len(rest), metadata.MaxReserveOps)
			if err := s.reserve(ctx, rest[:n], true); err != nil {
				s.cfg.Logger.Warn("drain: releasing offset reservations failed; the next owners leave gaps", "err", err)
			}
			rest = rest[n:]
		}
	}
	moved := 0
	var errs []error
	for _, st := range streams {
		st.mu.Lock()
		info, epoch, clean := st.info, st.info.Epoch, st.uploaded == st.next
		st.mu.Unlock()
		if !clean {
			errs = append(errs, fmt.Errorf("%s: not fully uploaded", info.Name))
			continue
		}
		if _, err := s.handOff(ctx, st, info, epoch, placement(info.Name, others).NodeID); err != nil {
			errs = append(errs, err)
			continue
		}
		moved++
	}
	for _, st := range streams {
		st.mu.Lock()
		st.moving = false // streams that failed to move keep being served
		st.mu.Unlock()
	}
	return moved, errors.Join(errs...)
}

// handOff makes node the owner of st (epoch+1) in the registry, conditioned
// on the record still being ours at epoch, and drops the local state. The
// caller has flushed st to object storage: the new owner adopts it from
// there.
func (s *Service) handOff(ctx context.Context, st *streamState, info metadata.Stream, epoch int64, node string) (metadata.Stream, error) {
	m, err := s.cluster.UpdateStream(ctx, info.Name, func(cur *metadata.Stream) error {
		if cur.ID != info.ID || cur.Owner != s.cfg.NodeID || cur.Epoch != epoch {
			return fmt.Errorf("%w: %s is no longer ours", metadata.ErrConflict, info.Name)
		}
		cur.Owner = node
		cur.Epoch++
		return nil
	})
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return metadata.Stream{}, fmt.Errorf("%s: %w", info.Name, err)
	}
	s.retire(st) // ends live reads: they reconnect and get redirected
	s.metrics.handoffs.Inc()
	s.cfg.Logger.Info("handed stream over", "stream", info.Name, "to", node, "epoch", epoch+1)
	return m, nil
}

// HandOver moves one stream this node serves to the live node nodeID, as
// Drain does for all of them (flush, then ownership in the registry with
// epoch+1; nodeID adopts it from object storage on its next request). The
// Kafka frontend uses it to spread a new topic's partitions over the
// cluster. It needs a cluster and object storage.
func (s *Service) HandOver(ctx context.Context, name, nodeID string) (Info, error) {
	if s.cluster == nil || s.tier == nil {
		return Info{}, fmt.Errorf("%w: handing a stream over needs a cluster and object storage", ErrUnavailable)
	}
	if nodeID == s.cfg.NodeID {
		return s.Describe(ctx, name)
	}
	members, err := s.liveMembers(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !slices.ContainsFunc(members, func(m metadata.Member) bool { return m.NodeID == nodeID }) {
		return Info{}, fmt.Errorf("%w: node %q is not live", ErrUnavailable, nodeID)
	}
	st, err := s.lookup(ctx, name)
	if err != nil {
		return Info{}, err
	}
	st.mu.Lock()
	st.moving = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.moving = false
		st.mu.Unlock()
	}()
	state := func() (metadata.Stream, int64, bool) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.info, st.info.Epoch, st.uploaded == st.next
	}
	info, epoch, clean := state()
	if !clean { // a new stream is clean: nothing to upload
		if err := s.Flush(ctx); err != nil {
			return Info{}, fmt.Errorf("hand over %s: flush: %w", name, err)
		}
		info, epoch, clean = state()
	}
	if !clean {
		return Info{}, fmt.Errorf("%w: hand over %s: not fully uploaded", ErrUnavailable, name)
	}
	m, err := s.handOff(ctx, st, info, epoch, nodeID)
	if err != nil {
		return Info{}, fmt.Errorf("hand over: %w", err)
	}
	return infoFromMeta(m), nil
}

// Rejoined is called after the node lost its lease and joined again with a
// new one. Streams another node claimed in between are dropped (their local
// state is stale); the rest are still ours and are served again.
func (s *Service) Rejoined(ctx context.Context) error {
	streams := s.loaded()
	for _, st := range streams {
		m, err := s.reg.GetStream(ctx, st.info.Name)
		if err != nil && !errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("rejoin: check ownership of %s: %w", st.info.Name, err)
		}
		if err != nil || m.ID != st.info.ID || m.Owner != s.cfg.NodeID || m.Epoch != st.info.Epoch {
			s.cfg.Logger.Warn("stream was taken over while this node had no lease; dropping local state", "stream", st.info.Name)
			s.retire(st)
		}
	}
	if err := s.recheckIdle(ctx); err != nil {
		return err
	}
	s.Unfence()
	return nil
}

// Describe returns a stream's registry description wherever it is owned
// (no offsets unless this node serves it). Frontends use it to pick a
// response format before a history read that any node may serve.
func (s *Service) Describe(ctx context.Context, name string) (Info, error) {
	if err := checkAccess(ctx, name); err != nil {
		return Info{}, err
	}
	if info, ok := s.describeLocal(name); ok {
		return info, nil
	}
	if err := validateFor(ctx, name); err != nil {
		return Info{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	m, err := s.reg.GetStream(rctx, name)
	if errors.Is(err, metadata.ErrNotFound) {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("%w: registry unreachable: %v", ErrUnavailable, err)
	}
	return infoFromMeta(m), nil
}
