package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/retry"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/extent"
	"github.com/PicoMQ/picomq/wal"
)

// Tier is what the service needs from object storage (tiering.Tier). Objects are immutable once uploaded.
type Tier interface {
	// Upload writes one object holding every given stream's batches
	// (streams in ascending id) and returns where each stream's bytes
	// landed, in the same order. It must fail rather than overwrite an
	// existing key.
	Upload(ctx context.Context, key string, streams []tiering.StreamBatches) ([]ObjectRef, int64, error)
	// ReadBatches returns whole, CRC-verified batches of ref's stream,
	// starting with the batch holding offset from: at least one batch,
	// then the following batches of the range as long as they fit in
	// maxBytes. A read that ends inside the range so says that the next
	// batch does not fit: a stored-batch page ends there without asking
	// again (readBatches). The bytes may be the block cache's own memory,
	// shared with other readers: never modify them (copy first, e.g. to
	// rewrite a Kafka batch header).
	ReadBatches(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) ([]byte, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
}

// Prefetcher is an optional Tier capability: start fetching ref's range
// because a reader is about to need it (the block cache's read-ahead). It
// must not block.
type Prefetcher interface {
	Prefetch(ref *ObjectRef)
}

// PieceReader is an optional Tier capability: ReadBatches without joining
// the batches into one slice. The pieces are consecutive stretches of the
// object as they lie in the block cache (never modified), in which a batch
// that straddles two of the cache's GETs continues from one piece into the
// next (record.WalkPieces reads them); a reader of stored batches that
// writes them out as they are saves the copies a page spanning two GETs
// costs otherwise. release, when not nil, ends the loan of that memory:
// it is called once the pieces (and anything sliced from them) are no
// longer used, after which the cache may reuse it; never calling it only
// keeps the memory from being reused.
type PieceReader interface {
	ReadBatchPieces(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) (pieces [][]byte, release func(), err error)
}

// UploadStream is one stream's contribution to an object.
type UploadStream struct {
	StreamID uint64
	First    int64    // offset of the first record
	Next     int64    // one past the last record
	Batches  [][]byte // RecordBatch v2 batches, in offset order
}

// withBatches is what Tier.Upload takes of ups: the streams that have
// batches (a stream with only a state change has no bytes in the object).
func withBatches(ups []UploadStream) []tiering.StreamBatches {
	out := make([]tiering.StreamBatches, 0, len(ups))
	for _, u := range ups {
		if len(u.Batches) > 0 {
			out = append(out, tiering.StreamBatches{Stream: u.StreamID, Batches: u.Batches})
		}
	}
	return out
}

// ObjectRef is one stream's range in an uploaded object (tiering owns
// the object vocabulary).
type ObjectRef = tiering.ObjectRef

// manifestEntry records offsets [first, next) of stream id and its state
// snapshot; ref nil is a state-only entry (no bytes in the object).
func manifestEntry(id uint64, first, next int64, ref *ObjectRef, state json.RawMessage) metadata.ManifestStream {
	ms := metadata.ManifestStream{State: state}
	if ref != nil {
		ms.Extent = ref.Extent
	}
	ms.StreamID, ms.First, ms.Next = id, first, next
	return ms
}

// commitObject commits the manifest of an uploaded object, replacing the
// manifests in replaces, fenced on sess: the session the node held when it
// took the snapshot the object was built from (see commitSession). If the
// commit certainly failed the object is unreferenced and is deleted (best
// effort: an orphan only costs space and the collector finds it); if its
// outcome is unknown the object stays, since a manifest may reference it;
// a lost lease fences the node.
func (s *Service) commitObject(ctx context.Context, sess metadata.Lease, m metadata.Manifest, replaces []string) error {
	// Once the object is uploaded, the commit is not abandoned halfway
	// because the flush was cancelled (shutdown): it is one etcd
	// transaction, bounded on its own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := s.tcfg.Manifests.CommitManifest(cctx, sess, m, replaces)
	if err == nil {
		return nil
	}
	if !errors.Is(err, metadata.ErrCommitUnknown) {
		_ = s.tier.Delete(context.WithoutCancel(ctx), m.Object)
	}
	if errors.Is(err, metadata.ErrLeaseLost) && sess == s.session() {
		s.fence(err)
	}
	return fmt.Errorf("commit manifest of %s: %w", m.Object, err)
}

func (s *Service) session() metadata.Lease {
	if s.tcfg.Session == nil {
		return nil
	}
	return s.tcfg.Session()
}

// commitSession returns the session a flush or compaction must commit
// under, taken before it looks at any stream: a commit must never use a
// session newer than the snapshot it commits. A node paused past its lease
// (SIGSTOP, a long GC) may resume in the middle of a flush, rejoin with a
// new session and drop the streams taken over meanwhile; the flush that
// was in flight still holds data of those streams at offsets the new owner
// has handed out since, and committing it under the new session would put
// a second, older copy of those offsets in the manifests. Committed under
// the old session it fails: that session's member key is gone.
func (s *Service) commitSession() (metadata.Lease, error) {
	sess := s.session()
	s.mu.RLock()
	fenced := s.fenced
	s.mu.RUnlock()
	if fenced != nil {
		// Without a live lease nothing may be committed; the data stays
		// in the WAL until the node has rejoined and re-checked ownership.
		return nil, fenced
	}
	if sess != nil && sess.Lost() {
		return nil, metadata.ErrLeaseLost
	}
	return sess, nil
}

func refFromManifest(m *metadata.Manifest, r metadata.ManifestStream) *ObjectRef {
	return &ObjectRef{Key: m.Object, ObjectSize: m.Size, Extent: r.Extent}
}

// Manifests is what the service needs from the registry for tiering.
type Manifests interface {
	CommitManifest(ctx context.Context, sess metadata.Lease, m metadata.Manifest, replaces []string) error
	Manifests(ctx context.Context) ([]metadata.Manifest, error)
	MaxManifestSeq(ctx context.Context, node string) (uint64, error)
}

// TierConfig enables tiering. With Tier nil the service keeps everything in
// the WAL (tests of the WAL-only path).
type TierConfig struct {
	Tier      Tier
	Manifests Manifests
	// Session is the node's live membership session (a *meta.Session);
	// flush commits are fenced on it so a node declared dead commits
	// nothing. It returns a nil interface, not a nil pointer in one, when
	// the node has no session.
	Session func() metadata.Lease
	// SealMaxAge / SealMaxBytes: a flush runs when the oldest unflushed
	// append is this old, or this many bytes are pending.
	SealMaxAge   time.Duration
	SealMaxBytes int64
	// MaxFlushBytes bounds one flush object, cut between streams (0:
	// eight seals, at least 64 MiB): after an outage the backlog goes up
	// as a series of bounded objects.
	MaxFlushBytes int64
	// MaxWALBytes bounds the WAL while object storage is unavailable:
	// above it appends fail with ErrUnavailable (503 + Retry-After) rather
	// than filling the disk.
	MaxWALBytes int64
}

// stateSnapshot is the stream state persisted with each flush (see
// metadata.ManifestStream.State): what WAL replay would otherwise rebuild.
type stateSnapshot struct {
	LastTS    int64                       `json:"lastTs,omitempty"`
	WriterSeq string                      `json:"writerSeq,omitempty"`
	Closed    bool                        `json:"closed,omitempty"`
	ClosedBy  *Producer                   `json:"closedBy,omitempty"`
	Producers map[string]producerSnapJSON `json:"producers,omitempty"`
	Txn       *txnSnapJSON                `json:"txn,omitempty"`
}

type producerSnapJSON struct {
	Epoch   uint64     `json:"epoch"`
	LastSeq uint64     `json:"lastSeq"`
	Recent  [][4]int64 `json:"recent,omitempty"` // seq, first, next, ts
	Fresh   bool       `json:"fresh,omitempty"`
}

func (st *streamState) snapshotLocked() json.RawMessage {
	snap := stateSnapshot{LastTS: st.lastTS, WriterSeq: st.writerSeq, Closed: st.closed, ClosedBy: st.closedBy}
	if len(st.producers) > 0 {
		snap.Producers = make(map[string]producerSnapJSON, len(st.producers))
		for id, ps := range st.producers {
			p := producerSnapJSON{Epoch: ps.epoch, LastSeq: ps.lastSeq, Fresh: ps.fresh}
			for i := 0; i < min(ps.n, dedupWindow); i++ {
				b := ps.recent[i]
				p.Recent = append(p.Recent, [4]int64{int64(b.seq), b.first, b.next, b.ts})
			}
			snap.Producers[id] = p
		}
	}
	st.trimAbortedLocked(st.info.StartOffset)
	snap.Txn = st.txn.snapshot()
	b, _ := json.Marshal(snap)
	return b
}

func (st *streamState) restoreSnapshot(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var snap stateSnapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		return fmt.Errorf("stream state snapshot: %w", err)
	}
	st.lastTS = max(st.lastTS, snap.LastTS)
	st.writerSeq = snap.WriterSeq
	st.closed, st.closedVisible, st.closedBy = snap.Closed, snap.Closed, snap.ClosedBy
	st.txn = snap.Txn.restore()
	st.producers = nil
	for id, p := range snap.Producers {
		if st.producers == nil {
			st.producers = make(map[string]*producerState)
		}
		ps := &producerState{epoch: p.Epoch, lastSeq: p.LastSeq, fresh: p.Fresh}
		for _, r := range p.Recent {
			ps.remember(sentBatch{seq: uint64(r[0]), first: r[1], next: r[2], ts: r[3]})
		}
		st.producers[id] = ps
	}
	return nil
}

// piece is one manifest entry of one stream.
type piece struct {
	ref         *ObjectRef
	first, next int64
	state       json.RawMessage
	order       int // manifest order: later commits win ties
}

// indexManifests groups manifest entries by stream id.
func indexManifests(ms []metadata.Manifest) map[uint64][]piece {
	per := map[uint64][]piece{}
	for i, m := range ms {
		for _, r := range m.Streams {
			per[r.StreamID] = append(per[r.StreamID], piece{ref: refFromManifest(&m, r), first: r.First, next: r.Next, state: r.State, order: i})
		}
	}
	return per
}

// applyPieces rebuilds a stream's object chunks and state snapshot from its
// manifest entries. st.mu must be held (or st not yet shared).
func (st *streamState) applyPieces(ps []piece) error {
	sort.SliceStable(ps, func(a, b int) bool {
		if ps[a].first != ps[b].first {
			return ps[a].first < ps[b].first
		}
		return ps[a].order < ps[b].order
	})
	var latest piece
	have := false
	for _, p := range ps {
		if p.next > p.first {
			if p.next <= st.next {
				continue // an older copy of a range already covered
			}
			if p.first < st.next {
				// A longer copy of a range starting where an applied
				// one starts: a replicated stream's takeover that was
				// retried (its first upload committed after the retry
				// listed the manifests) uploads the adopted copy again,
				// and the retry's copy may hold more of the same log.
				// The owner serves the longer one; so does every view.
				i := slices.IndexFunc(st.chunks, func(c chunk) bool { return c.base == p.first })
				if i < 0 {
					return fmt.Errorf("stream: manifests of %s overlap: have [0,%d), next object range is [%d,%d)", st.info.Name, st.next, p.first, p.next)
				}
				st.chunks, st.next = st.chunks[:i], p.first
			}
			if p.first > st.next {
				// Offsets an owner lost for good had handed out
				// (reserve.go): nothing holds them.
				st.chunks = append(st.chunks, chunk{base: st.next, next: p.first, gap: true})
			}
			st.chunks = append(st.chunks, chunk{base: p.first, next: p.next, obj: p.ref})
			st.next = p.next
		} else if p.next > st.next {
			// A state-only entry past the ranges: its owner had nothing
			// below it to upload, so what is missing below it is a gap
			// (snapshotFlush records a lost tail this way).
			st.chunks = append(st.chunks, chunk{base: st.next, next: p.next, gap: true})
			st.next = p.next
		}
		// The newest state is the one with the highest end offset; among
		// equal ends (state-only flushes, e.g. a close) the later commit.
		if !have || p.next > latest.next || (p.next == latest.next && p.order >= latest.order) {
			latest, have = p, true
		}
	}
	st.hwm, st.uploaded = st.next, st.next
	st.checkInvariantsLocked()
	if have {
		if err := st.restoreSnapshot(latest.state); err != nil {
			return fmt.Errorf("stream %s: %w", st.info.Name, err)
		}
	}
	return nil
}

// loadManifests rebuilds every loaded stream from the committed manifests,
// before the WAL is replayed on top.
func (s *Service) loadManifests(ctx context.Context) error {
	ms, err := s.tcfg.Manifests.Manifests(ctx)
	if err != nil {
		return fmt.Errorf("stream: load manifests: %w", err)
	}
	for id, ps := range indexManifests(ms) {
		st := s.openState(id)
		if st == nil {
			continue // deleted, or owned by another node
		}
		if err := st.applyPieces(ps); err != nil {
			return err
		}
	}
	seq, err := s.tcfg.Manifests.MaxManifestSeq(ctx, s.cfg.NodeID)
	if err != nil {
		return err
	}
	s.flushSeq = seq
	return nil
}

// maxFlushBytes bounds the record bytes of one flush object (a stream
// larger than that still goes whole): eight seals, at least 64 MiB.
func (s *Service) maxFlushBytes() int64 {
	if s.tcfg.MaxFlushBytes > 0 {
		return s.tcfg.MaxFlushBytes
	}
	return max(8*s.tcfg.SealMaxBytes, 64<<20)
}

// requestFlush asks the flush loop to run soon: pending bytes reached the
// seal size (re-checked when the loop gets to it, since appends during a
// flush keep asking), or, with urgent, an object-durability append waits.
func (s *Service) requestFlush(urgent bool) {
	if urgent {
		s.flushUrgent.Store(true)
	}
	select {
	case s.flushNow <- struct{}{}:
	default:
	}
}

// RunFlusher seals and uploads pending stream data until ctx is done, then
// runs one last flush so a graceful shutdown leaves nothing only in the WAL
// (a job: see Jobs).
func (s *Service) RunFlusher(ctx context.Context) error {
	if s.tier == nil {
		return nil
	}
	// The seal age counts from the oldest unflushed append, not from the
	// last flush: a size-triggered flush is not followed by a small one
	// when the ticker happens to fire. The ticker only sets the precision.
	age := s.tcfg.SealMaxAge
	tick := time.NewTicker(max(age/4, 5*time.Millisecond))
	defer tick.Stop()
	// Failed flushes back off by the repository's one rule (sdk/retry):
	// nominal 100 ms doubling to 10 s, each wait drawn from half to all of it.
	backoff := retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second}.Backoff()
	for {
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
				since := s.pendingSince.Load()
				if since == 0 || time.Since(time.Unix(0, since)) < age {
					continue
				}
			case <-s.flushNow:
				if !s.flushUrgent.Swap(false) && s.pending.Load() < s.tcfg.SealMaxBytes {
					continue // a flush since the request took those bytes
				}
			}
		}
		if ctx.Err() != nil {
			// Flush until nothing is pending (a backlog takes several
			// bounded objects), while each flush makes progress.
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for before := int64(-1); ; {
				pending := s.pending.Load()
				if pending == before {
					break
				}
				before = pending
				if err := s.Flush(fctx); err != nil {
					s.cfg.Logger.Warn("final flush failed; data stays in the WAL", "err", err)
					break
				}
				if s.pending.Load() == 0 {
					break
				}
			}
			cancel()
			return nil
		}
		if err := s.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			wait := backoff.Next()
			s.cfg.Logger.Warn("flush to object storage failed; will retry", "err", err, "retry_in", wait)
			s.metrics.flushErrors.Inc()
			_ = retry.Sleep(ctx, wait) // ctx's end is handled at the top of the loop
			continue
		}
		backoff.Reset()
	}
}

// flushItem is one stream's part of a flush.
type flushItem struct {
	st      *streamState
	base    int64 // == st.uploaded when collected
	first   int64 // where the object range starts: base, or past a gap
	end     int64
	refs    []chunk
	state   json.RawMessage
	pending *wal.Pending
	// unflushed is st.unflushed at the snapshot: what this flush takes
	// off Service.pending once committed.
	unflushed int64
}

// Flush uploads every stream's unflushed data as one object, commits its
// manifest in etcd (fenced on the node's lease) and then lets the WAL drop
// what is now in object storage. One PUT and one etcd transaction per flush,
// however many streams took part.
func (s *Service) Flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	sess, err := s.commitSession()
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	snapshotAt := time.Now()
	items := s.snapshotFlush()
	if len(items) == 0 {
		s.truncateWAL()
		return nil
	}
	// Everything snapshotted must be durable before it is uploaded: the
	// WAL completes in order, so waiting for each stream's last write is
	// enough.
	for _, it := range items {
		if it.pending != nil {
			if err := it.pending.Wait(ctx); err != nil {
				return fmt.Errorf("flush: wait for WAL: %w", err)
			}
		}
	}
	items, ups, size, capped, err := s.flushBatches(items)
	if err != nil {
		return err
	}
	seq := s.nextSeq()
	key := tiering.L0Key(s.cfg.NodeID, seq, tiering.NewNonce())
	start := time.Now()
	var ranges []ObjectRef
	var objSize int64
	if size > 0 {
		ranges, objSize, err = s.tier.Upload(ctx, key, withBatches(ups))
		if err != nil {
			return fmt.Errorf("flush: upload %s: %w", key, err)
		}
	}
	// A flush of state changes only (a close after the last append) has
	// no bytes, and the object format has no empty object: it commits a
	// manifest of state-only entries whose key is never written. That is
	// the same entry a mixed flush already commits for such a stream, so
	// a new owner or a restart without the WAL rebuilds the state the
	// usual way, and every consumer of manifests stays as it is: readers
	// and compaction skip empty ranges, garbage collection's delete of a
	// missing object is a no-op, and the orphan sweep only looks at
	// objects that exist. Without it the close stayed in the WAL until
	// the next flush with data, and a takeover in between lost it.
	m := metadata.Manifest{Node: s.cfg.NodeID, Seq: seq, Object: key, Size: objSize, CreatedAt: time.Now().UTC()}
	refs, err := flushRefs(&m, items, ranges)
	if err != nil {
		_ = s.tier.Delete(context.WithoutCancel(ctx), key)
		return err
	}
	if err := s.commitObject(ctx, sess, m, nil); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	s.pending.Add(-s.applyFlush(items, refs))
	if capped {
		s.requestFlush(true) // the streams left out go in the next flush, now
	}
	// Appends that came after the snapshot are younger than it; an append
	// racing with this reset sets its own time (it adds to pending before
	// it sets pendingSince, and this reads pending after the reset).
	s.pendingSince.Store(0)
	if s.pending.Load() > 0 {
		s.pendingSince.CompareAndSwap(0, snapshotAt.UnixNano())
	}
	s.metrics.flushes.Inc()
	s.metrics.flushBytes.Add(float64(size))
	s.metrics.flushSeconds.Observe(time.Since(start).Seconds())
	s.truncateWAL()
	return nil
}

// snapshotFlush takes, in ascending stream id, every loaded stream that
// has WAL data not yet in objects: the range [uploaded, next), its state
// snapshot, its last pending WAL write and its chunks from uploaded on.
func (s *Service) snapshotFlush() []flushItem {
	streams := s.loaded()
	sort.Slice(streams, func(i, j int) bool { return streams[i].info.ID < streams[j].info.ID })
	var items []flushItem
	for _, st := range streams {
		st.mu.Lock()
		if st.deleted || (st.walLow == 0 && !st.gapTailLocked()) {
			st.mu.Unlock()
			continue
		}
		it := flushItem{st: st, base: st.uploaded, first: st.uploaded, end: st.next, state: st.snapshotLocked(), pending: st.lastPending, unflushed: st.unflushed}
		i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > st.uploaded })
		for ; i < len(st.chunks) && st.chunks[i].gap; i++ {
			// A gap left by a takeover (reserve.go) is not uploaded:
			// the object range starts after it, and the manifests show
			// the gap as the space between ranges.
			it.first = st.chunks[i].next
		}
		it.refs = append(it.refs, st.chunks[i:]...)
		st.mu.Unlock()
		items = append(items, it)
	}
	return items
}

// gapTailLocked reports whether everything st holds past what object
// storage holds is a gap (a takeover's, or a lost disk's: reserve.go).
// Such a stream has nothing to upload, but a flush records the gap as a
// state-only entry at its end, so that other nodes' views of the stream
// (a fork's source, a history read) know nothing will ever fill it,
// rather than wait for records no owner holds. st.mu held.
func (st *streamState) gapTailLocked() bool {
	if st.uploaded >= st.next {
		return false
	}
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > st.uploaded })
	if i == len(st.chunks) {
		return false
	}
	for ; i < len(st.chunks); i++ {
		if !st.chunks[i].gap {
			return false
		}
	}
	return true
}

// maxFlushBuf bounds the read buffer a service keeps between flushes.
const maxFlushBuf = 64 << 20

// flushBatches reads the items' batches back from the WAL. One object
// holds at most maxFlushBytes, cut between streams (a stream's range and
// its state snapshot always travel together), so the backlog of a long
// object-store outage is uploaded as a series of bounded objects instead
// of one that must fit in memory twice: it returns the items that fit,
// their uploads, their size and whether items were left out. The cut is
// made on the WAL entries' lengths, which are a little more than the
// batches they hold.
func (s *Service) flushBatches(items []flushItem) ([]flushItem, []UploadStream, int64, bool, error) {
	capped := false
	var est int64
	for k, it := range items {
		if k > 0 && est >= s.maxFlushBytes() {
			items = items[:k]
			capped = true
			break
		}
		for _, c := range it.refs {
			if c.obj == nil {
				est += int64(c.pos.Len)
			}
		}
	}
	// The entries are read with one pread per run of neighbouring WAL
	// records (a flush's entries were mostly group-committed back to back)
	// into one buffer, kept for the next flush (under flushMu) when not
	// too large, instead of one pread and one allocation per entry: the
	// read-back cost the node a seventh of its CPU under a steady produce
	// load with one allocation per entry, and 3-4 % with one pread each.
	var pos []wal.Pos
	var of []int32 // pos[i] belongs to item of[i]
	ups := make([]UploadStream, len(items))
	for k, it := range items {
		ups[k] = UploadStream{StreamID: it.st.info.ID, First: it.first, Next: it.end}
		for _, c := range it.refs {
			if c.obj == nil {
				pos = append(pos, c.pos)
				of = append(of, int32(k))
			}
		}
	}
	var size int64
	buf, err := s.log.ReadMany(pos, s.flushBuf, func(i int, data []byte) error {
		e, err := decodeEntry(data)
		if err != nil {
			return fmt.Errorf("flush: WAL entry: %w", err)
		}
		u := &ups[of[i]]
		u.Batches = append(u.Batches, e.batch)
		size += int64(len(e.batch))
		return nil
	})
	if cap(buf) <= maxFlushBuf {
		s.flushBuf = buf[:0]
	}
	if err != nil {
		return nil, nil, 0, false, fmt.Errorf("flush: read WAL: %w", err)
	}
	for k := range ups {
		if err := coversExactly(ups[k]); err != nil {
			// Committing it would put a manifest in etcd that names
			// offsets its object does not hold: readers would be moved
			// past them and they would be lost for good. Fail loudly;
			// the data stays in the WAL.
			return nil, nil, 0, false, fmt.Errorf("flush: stream %s: %w", items[k].st.info.Name, err)
		}
	}
	return items, ups, size, capped, nil
}

// coversExactly checks that u's batches are consecutive and hold exactly
// the offsets [u.First, u.Next) its manifest entry will claim.
func coversExactly(u UploadStream) error {
	at := u.First
	for _, b := range u.Batches {
		h, err := record.ParseHeader(b)
		if err != nil {
			return fmt.Errorf("a WAL batch of the range [%d, %d): %w", u.First, u.Next, err)
		}
		if h.BaseOffset != at {
			return fmt.Errorf("the index's WAL chunks of [%d, %d) jump from offset %d to %d", u.First, u.Next, at, h.BaseOffset)
		}
		at = h.LastOffset() + 1
	}
	if at != u.Next {
		return fmt.Errorf("the index's WAL chunks of [%d, %d) end at %d", u.First, u.Next, at)
	}
	return nil
}

// flushRefs matches the uploaded ranges to the items, adds each item's
// manifest entry to m and returns each item's object reference. Streams
// with only state changes (a close) hold no bytes and get no range from
// the uploader; an object that does not describe a stream with bytes is
// an error (the caller deletes it).
func flushRefs(m *metadata.Manifest, items []flushItem, ranges []ObjectRef) ([]*ObjectRef, error) {
	refs := make([]*ObjectRef, len(items))
	ri := 0
	for i, it := range items {
		var data *ObjectRef
		ref := &ObjectRef{Key: m.Object, Extent: extent.Extent{StreamID: it.st.info.ID, First: it.first, Next: it.end}}
		if it.end > it.first {
			// Streams with only state changes (a close) hold no bytes
			// and get no range from the uploader.
			if ri >= len(ranges) || ranges[ri].StreamID != it.st.info.ID {
				return nil, fmt.Errorf("flush: object %s does not describe stream %d", m.Object, it.st.info.ID)
			}
			ref = &ranges[ri]
			data = ref
			ri++
		}
		refs[i] = ref
		m.Streams = append(m.Streams, manifestEntry(it.st.info.ID, it.first, it.end, data, it.state))
	}
	return refs, nil
}

// applyFlush switches each committed item's WAL chunks to its object
// chunk, moves the stream's uploaded offset and WAL low-water mark, wakes
// the upload waiters, and returns the bytes no longer pending.
func (s *Service) applyFlush(items []flushItem, refs []*ObjectRef) int64 {
	var flushed int64
	for k, it := range items {
		st := it.st
		st.mu.Lock()
		if !st.deleted { // retire already took a deleted stream's bytes off
			st.unflushed -= it.unflushed
			flushed += it.unflushed
		}
		if st.uploaded == it.base && !st.deleted {
			// Replace the WAL chunks of [base, end) by one object chunk.
			i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > it.first })
			j := sort.Search(len(st.chunks), func(j int) bool { return st.chunks[j].base >= it.end })
			if it.end > it.first {
				nc := make([]chunk, 0, len(st.chunks)-(j-i)+1)
				nc = append(nc, st.chunks[:i]...)
				nc = append(nc, chunk{base: it.first, next: it.end, obj: refs[k]})
				nc = append(nc, st.chunks[j:]...)
				st.chunks = nc
				j = i + 1
			}
			st.uploaded = it.end
			if it.end > st.hwm {
				// Committed: readable now. For `object` this is where
				// records become readable; a `local` record is normally
				// published by its append, but one whose append gave up
				// (its offset reservation failed, say while the lease
				// was in doubt) would otherwise stay unreadable until a
				// later append, and a reader at its offset would wait.
				st.hwm = it.end
				st.wakeReadersLocked()
			}
			st.checkInvariantsLocked()
			switch {
			case st.lastPending == it.pending:
				// Nothing was appended since the snapshot.
				st.walLow = 0
			case j < len(st.chunks) && st.chunks[j].obj == nil:
				st.walLow = st.chunks[j].pos.Segment
			default:
				// Only state-only entries (a close) came after the
				// snapshot; keep the WAL from the last one on.
				st.walLow = st.lastPending.Pos().Segment
			}
			st.wakeUploadWaitersLocked()
			s.shipUploadedLocked(st) // followers release their copies
		}
		st.mu.Unlock()
	}
	return flushed
}

// truncateWAL deletes WAL segments that hold nothing unflushed.
func (s *Service) truncateWAL() {
	w := s.log
	low := w.ActiveSegment()
	s.mu.RLock()
	for _, st := range s.byID {
		st.mu.Lock()
		if st.walLow != 0 && st.walLow < low {
			low = st.walLow
		}
		st.mu.Unlock()
	}
	s.mu.RUnlock()
	if r := s.replicaWALLow(); r != 0 && r < low {
		low = r // copies of other owners' streams not uploaded yet
	}
	if err := w.RemoveSegmentsBefore(low); err != nil {
		s.cfg.Logger.Warn("WAL truncation failed", "before_segment", low, "err", err)
	}
}

// waitUploaded blocks until offsets below end are committed in object
// storage (durability "object").
func (s *Service) waitUploaded(ctx context.Context, st *streamState, end int64) error {
	for {
		st.mu.Lock()
		up, wake, deleted := st.uploaded, st.uploadedChangedLocked(), st.deleted
		st.mu.Unlock()
		if up >= end {
			return nil
		}
		if deleted {
			return fmt.Errorf("%w: deleted while waiting for upload", ErrNotFound)
		}
		s.mu.RLock()
		fenced := s.fenced
		s.mu.RUnlock()
		if fenced != nil {
			// Without a lease the flush can never commit: fail now, the
			// append is not acknowledged.
			return fmt.Errorf("%w: %v", ErrUnavailable, fenced)
		}
		s.requestFlush(true)
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Fence stops appends after the node lost its etcd lease: another node may
// own its streams now, so acknowledging anything more could lose it.
func (s *Service) Fence(err error) { s.fence(err) }

func (s *Service) fence(err error) {
	s.mu.Lock()
	first := s.fenced == nil
	if first {
		s.fenced = err
		s.fencedNow.Store(true)
		s.cfg.Logger.Error("node lease lost; refusing appends until it rejoins", "err", err)
	}
	streams := s.loadedLocked()
	s.mu.Unlock()
	// Wake appends waiting for object durability: they fail now.
	for _, st := range streams {
		st.mu.Lock()
		st.wakeUploadWaitersLocked()
		st.mu.Unlock()
	}
}

// Unfence re-enables appends after the node rejoined with a new session.
func (s *Service) Unfence() {
	s.mu.Lock()
	s.fenced = nil
	s.fencedNow.Store(false)
	s.mu.Unlock()
}

// ErrObjectMissing is what Tier.ReadBatches wraps when an object does not
// exist (any more): the reader's index is stale, not the data lost.
var ErrObjectMissing = tiering.ErrObjectMissing

// refreshObjects rebuilds the object part of a stream's index from fresh
// manifests, keeping the WAL chunks above the uploaded watermark.
func (s *Service) refreshObjects(ctx context.Context, st *streamState) error {
	ms, err := s.manifestsSince(ctx, time.Now())
	if err != nil {
		return err
	}
	st.mu.Lock()
	info := st.info // retention and PATCH update it under the lock
	st.mu.Unlock()
	fresh := &streamState{info: info, next: logStart(info)} // a fork's own log starts at its fork point
	if err := fresh.applyPieces(indexManifests(ms)[info.ID]); err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.uploaded == 0 { // a remote view: it is rebuilt per read anyway
		st.chunks = fresh.chunks
		return nil
	}
	// The listing's chunks up to where both it and this node's index
	// reach, then the index's own from there: a flush that committed
	// after the listing was read ends beyond the listing, and splicing at
	// st.uploaded instead left its range in neither (a hole readers were
	// moved past).
	cut := min(fresh.next, st.uploaded)
	var objs []chunk
	end := logStart(info)
	for _, c := range fresh.chunks {
		if c.next > cut {
			break
		}
		objs = append(objs, c)
		end = c.next
	}
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > end })
	if i < len(st.chunks) && st.chunks[i].base != end {
		// The index has no chunk boundary where the listing's stop: keep
		// it as it is (the read fails as unavailable and is retried).
		return fmt.Errorf("%w: %s: the manifests and this node's index of the stream disagree at offset %d", ErrUnavailable, info.Name, end)
	}
	st.chunks = append(objs, st.chunks[i:]...)
	st.checkInvariantsLocked()
	return nil
}
