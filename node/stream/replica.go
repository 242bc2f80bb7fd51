package stream

// The follower side of `replicated` durability (docs/durability.md).
//
// A follower writes the owner's WAL entries of a stream to its own WAL,
// each wrapped with the owner's epoch and the offset it follows (below),
// and answers once they are fsynced, or, with ReplicaAckWrite, once they
// are written to its WAL file (the fsync follows in the same commit). It keeps the stream's copy (the
// "tail": what the owner has not uploaded yet) until the owner reports it
// uploaded, and gives it to a node taking the stream over. It refuses
// frames of an epoch lower than the highest it has seen for the stream:
// after a takeover the old owner can no longer count it as a copy.
//
// A replica WAL entry:
//
//	+-------------+-----------+-----------+----------+---------------------+
//	| version (1) | flags (1) | epoch (8) | from (8) | owner's entry (rest) |
//	+-------------+-----------+-----------+----------+---------------------+
//
// flags bit 0 marks a fence: the follower learnt a higher epoch (the
// owner's entry is then a batch-less header naming the stream). Replaying
// the WAL rebuilds every copy and every fence.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

const (
	replicaEntryVersion = 3
	replicaHeaderSize   = 18
	replicaFlagFence    = 1 << 0
)

// replicaStore holds this node's copies of streams owned by other nodes.
type replicaStore struct {
	mu   sync.Mutex
	byID map[uint64]*replica
}

// replica is one stream's copy: entries [base, next) of the owner's log.
type replica struct {
	name  string
	epoch int64
	// fromOwner: a frame of epoch's owner was applied (a fence alone
	// does not set it), so the copy continues that owner's log.
	fromOwner  bool
	base, next int64
	entries    []replicaEntry
	touched    time.Time
	// last is the WAL entry of the latest frame applied since this node
	// started: with a lazy WAL (ReplicaAckWrite and
	// --replica-sync-interval) it may be written and not yet durable,
	// and the WAL reads only durable entries, so whoever reads the copy
	// waits for it first (durable).
	last *wal.Pending
}

// durableCopy waits until the copy's entries are durable in this node's WAL
// (at once, unless some are lazy and unsynced: the wait has the WAL
// fdatasync them now). rs.mu not held; last read under it.
func (s *Service) durableCopy(ctx context.Context, last *wal.Pending) error {
	if last == nil {
		return nil
	}
	if err := last.Wait(ctx); err != nil {
		return s.waitError("replica", err, ctx)
	}
	return nil
}

type replicaEntry struct {
	base, next int64
	pos        wal.Pos
}

func (r *replica) reset(at int64) {
	r.entries, r.base, r.next = nil, at, at
}

// truncate drops the copy from offset at on (the owner resends it).
func (r *replica) truncate(at int64) {
	i := sort.Search(len(r.entries), func(i int) bool { return r.entries[i].next > at })
	r.entries = r.entries[:i]
	r.next = at
}

// release drops what object storage holds (offsets below uploaded).
func (r *replica) release(uploaded int64) {
	i := 0
	for i < len(r.entries) && r.entries[i].next <= uploaded {
		i++
	}
	if i > 0 {
		r.entries = append([]replicaEntry(nil), r.entries[i:]...)
	}
	if len(r.entries) > 0 {
		r.base = r.entries[0].base
	} else {
		r.base = max(r.base, min(uploaded, r.next))
	}
}

// place positions r for a frame or replayed entry of epoch that follows
// offset from. It reports false when the copy does not reach from and
// object storage (below uploaded) does not cover the hole either.
func (r *replica) place(epoch, from, uploaded int64) bool {
	switch {
	case epoch > r.epoch || !r.fromOwner:
		// A copy of another ownership (or none): it can only start
		// where object storage ends.
		if from > uploaded {
			r.epoch, r.fromOwner = max(r.epoch, epoch), false
			return false
		}
		r.reset(from)
	case from == r.next:
	case from >= r.base && from < r.next:
		r.truncate(from)
	case from <= uploaded || from < r.base:
		r.reset(from)
	default:
		return false
	}
	r.epoch, r.fromOwner = epoch, true
	return true
}

// entrySpan is the offsets an owner's WAL entry takes after next: its
// batch's, or none for a batch-less entry (a close).
func entrySpan(e *entry, next int64) (base, end int64, err error) {
	if !e.hasBatch() {
		return next, next, nil
	}
	h, err := record.ParseHeader(e.batch)
	if err != nil {
		return 0, 0, err
	}
	return h.BaseOffset, h.BaseOffset + int64(h.LastOffsetDelta) + 1, nil
}

func appendReplicaHeader(dst []byte, flags byte, epoch, from int64) []byte {
	dst = append(dst, replicaEntryVersion, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(epoch))
	return binary.BigEndian.AppendUint64(dst, uint64(from))
}

// parseReplicaEntry splits a replica WAL entry.
func parseReplicaEntry(data []byte) (flags byte, epoch, from int64, inner []byte, err error) {
	if len(data) < replicaHeaderSize || data[0] != replicaEntryVersion {
		return 0, 0, 0, nil, fmt.Errorf("short or foreign replica WAL entry (%d bytes)", len(data))
	}
	return data[1], int64(binary.BigEndian.Uint64(data[2:10])), int64(binary.BigEndian.Uint64(data[10:18])), data[replicaHeaderSize:], nil
}

// replayReplica applies one replica entry found in the WAL at start.
func (s *Service) replayReplica(pos wal.Pos, data []byte) error {
	flags, epoch, from, inner, err := parseReplicaEntry(data)
	if err != nil {
		return err
	}
	e, err := decodeEntry(inner)
	if err != nil {
		return err
	}
	rs := &s.replicas
	r := rs.byID[e.streamID]
	if r == nil {
		r = &replica{epoch: epoch, base: from, next: from}
		if rs.byID == nil {
			rs.byID = map[uint64]*replica{}
		}
		rs.byID[e.streamID] = r
	}
	r.touched = time.Now()
	if flags&replicaFlagFence != 0 {
		if epoch > r.epoch {
			r.epoch, r.fromOwner = epoch, false
		}
		return nil
	}
	if epoch < r.epoch {
		return nil // refused when it came: never written (defensive)
	}
	r.place(epoch, from, from)
	base, end, err := entrySpan(&e, r.next)
	if err != nil {
		return err
	}
	if base != r.next {
		r.truncate(min(base, r.next))
		r.next = base
	}
	if end > base {
		r.entries = append(r.entries, replicaEntry{base: base, next: end, pos: pos})
	}
	r.next = end
	return nil
}

// ApplyReplica writes the frames' entries to this node's WAL as copies of
// their streams and answers each frame once its entries are fsynced (or
// written, with ReplicaAckWrite).
func (s *Service) ApplyReplica(ctx context.Context, frames []ReplicaFrame) ([]ReplicaResult, error) {
	out, wait, err := s.StartReplica(frames)
	if err != nil {
		return nil, err
	}
	if err := wait(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// StartReplica is ApplyReplica in two steps, so a connection can pipeline
// requests: it enqueues the frames' entries in this node's WAL (requests
// enqueued in the order they arrive are written in that order) and
// returns the answers, which hold once wait has returned nil (the entries
// are fsynced, in the same commit group as whatever else this node's WAL
// commits meanwhile; with ReplicaAckWrite, written to the WAL file and
// not yet fsynced: the answer does not wait for the disk).
func (s *Service) StartReplica(frames []ReplicaFrame) (_ []ReplicaResult, wait func(context.Context) error, _ error) {
	if err := s.Ready(); err != nil {
		return nil, nil, err
	}
	out := make([]ReplicaResult, len(frames))
	var last *wal.Pending
	var buf []byte
	rs := &s.replicas
	onWrite := s.cfg.Replication.Ack == ReplicaAckWrite
	enqueue := s.log.EnqueueForWait
	if onWrite {
		enqueue = s.log.EnqueueLazy
	}
	rs.mu.Lock()
	for i, f := range frames {
		out[i] = ReplicaResult{StreamID: f.StreamID, Epoch: f.Epoch}
		if st := s.local(f.Name); st != nil && st.info.ID == f.StreamID && st.info.Epoch >= f.Epoch {
			// This node owns the stream at this epoch or a later one:
			// whoever sends is stale. (A sender of a later epoch means
			// this node's ownership is what is stale; it drops it when
			// it rejoins, and meanwhile keeps the copy.)
			out[i].Status, out[i].Epoch = ReplicaFenced, st.info.Epoch
			continue
		}
		r := rs.byID[f.StreamID]
		if r == nil {
			r = &replica{epoch: f.Epoch, base: f.From, next: f.From}
			if rs.byID == nil {
				rs.byID = map[uint64]*replica{}
			}
			rs.byID[f.StreamID] = r
		}
		r.touched = time.Now()
		if f.Epoch < r.epoch {
			out[i].Status, out[i].Epoch = ReplicaFenced, r.epoch
			continue
		}
		if !r.place(f.Epoch, f.From, f.Uploaded) {
			out[i].Status, out[i].Next = ReplicaNeed, r.next
			if !r.fromOwner {
				out[i].Next = -1 // nothing of this owner's: from its floor
			}
			continue
		}
		r.name = f.Name
		r.release(f.Uploaded)
		var err error
		for _, data := range f.Entries {
			var e entry
			if e, err = decodeEntry(data); err != nil || e.streamID != f.StreamID || data[0] != entryVersion {
				err = fmt.Errorf("%w: frame of stream %d: entry: %v", ErrInvalidArgument, f.StreamID, err)
				break
			}
			base, end, perr := entrySpan(&e, r.next)
			if perr != nil || base < r.next {
				err = fmt.Errorf("%w: frame of stream %d: entry at %d overlaps the copy's end %d (%v)", ErrInvalidArgument, f.StreamID, base, r.next, perr)
				break
			}
			buf = appendReplicaHeader(buf[:0], 0, f.Epoch, r.next)
			buf = append(buf, data...)
			p, werr := enqueue(buf)
			if werr != nil {
				rs.mu.Unlock()
				s.fail(werr)
				return nil, nil, fmt.Errorf("%w: write-ahead log: %v", ErrUnavailable, werr)
			}
			last, r.last = p, p
			if end > base {
				r.entries = append(r.entries, replicaEntry{base: base, next: end, pos: p.Pos()})
			}
			r.next = end
		}
		if err != nil {
			rs.mu.Unlock()
			if last != nil {
				last.Done() // written all the same: hand it to the WAL writer
			}
			return nil, nil, err
		}
		out[i].Status, out[i].Next = ReplicaOK, r.next
	}
	rs.mu.Unlock()
	wait = func(ctx context.Context) error {
		if last != nil {
			var err error
			if onWrite {
				// The WAL fdatasyncs the entries right after, or at most
				// --replica-sync-interval later. If that fails, this
				// node's WAL fails: every later request
				// gets an error, so the owner stops counting this copy
				// as in sync within its lag timeout.
				err = last.WaitWritten(ctx)
			} else {
				err = last.Wait(ctx)
			}
			if err != nil {
				return s.waitError("replica", err, ctx)
			}
		}
		s.metrics.replicaFrames.Add(float64(len(frames)))
		return nil
	}
	return out, wait, nil
}

// ReplicaTail fences stream id at epoch (frames of a lower epoch are
// refused from now on, also after a restart) and returns this node's copy
// of it from offset from on: a new owner pulls it at a takeover.
func (s *Service) ReplicaTail(ctx context.Context, id uint64, epoch, from int64) (ReplicaFrame, error) {
	rs := &s.replicas
	rs.mu.Lock()
	r := rs.byID[id]
	if r == nil {
		r = &replica{epoch: 0, base: from, next: from}
		if rs.byID == nil {
			rs.byID = map[uint64]*replica{}
		}
		rs.byID[id] = r
	}
	if epoch < r.epoch {
		rs.mu.Unlock()
		return ReplicaFrame{}, fmt.Errorf("%w: stream %d is at epoch %d here, not %d", ErrConflict, id, r.epoch, epoch)
	}
	var fence *wal.Pending
	if epoch > r.epoch {
		r.epoch, r.fromOwner = epoch, false
		buf := appendReplicaHeader(nil, replicaFlagFence, epoch, r.next)
		buf = appendEntryHeader(buf, id, nil, "", false, true)
		p, err := s.log.EnqueueForWait(buf)
		if err != nil {
			rs.mu.Unlock()
			s.fail(err)
			return ReplicaFrame{}, fmt.Errorf("%w: write-ahead log: %v", ErrUnavailable, err)
		}
		fence = p
	}
	r.touched = time.Now()
	var ps []wal.Pos
	first := r.next
	for _, e := range r.entries {
		if e.next > from {
			if len(ps) == 0 {
				first = e.base
			}
			ps = append(ps, e.pos)
		}
	}
	name, last := r.name, r.last
	rs.mu.Unlock()
	if fence != nil {
		if err := fence.Wait(ctx); err != nil {
			return ReplicaFrame{}, s.waitError("replica fence", err, ctx)
		}
	} else if err := s.durableCopy(ctx, last); err != nil {
		return ReplicaFrame{}, err // no fence (already at epoch) to cover the copy
	}
	f := ReplicaFrame{StreamID: id, Name: name, Epoch: epoch, From: first}
	for _, p := range ps {
		data, err := s.log.ReadAt(p, nil)
		if err != nil {
			return ReplicaFrame{}, fmt.Errorf("%w: read replica of stream %d: %v", ErrUnavailable, id, err)
		}
		_, _, _, inner, err := parseReplicaEntry(data)
		if err != nil {
			return ReplicaFrame{}, fmt.Errorf("replica of stream %d: %w", id, err)
		}
		f.Entries = append(f.Entries, inner)
	}
	return f, nil
}

// dropReplica forgets this node's copy of stream id (it is uploaded, or
// the stream is gone); its WAL segments can then be truncated.
func (s *Service) dropReplica(id uint64) {
	s.replicas.mu.Lock()
	delete(s.replicas.byID, id)
	s.replicas.mu.Unlock()
}

// replicaWALLow is the oldest WAL segment a copy still needs (0: none).
func (s *Service) replicaWALLow() uint64 {
	s.replicas.mu.Lock()
	defer s.replicas.mu.Unlock()
	var low uint64
	for _, r := range s.replicas.byID {
		if len(r.entries) > 0 && (low == 0 || r.entries[0].pos.Segment < low) {
			low = r.entries[0].pos.Segment
		}
	}
	return low
}

// ReplicaSets is what the follower side needs from the registry to know
// when a copy is no longer needed.
type ReplicaSets interface {
	ReplicaSet(ctx context.Context, id uint64) (metadata.ReplicaSet, error)
	PutReplicaSet(ctx context.Context, sess metadata.Lease, id uint64, prev int64, rs metadata.ReplicaSet) (int64, error)
}

// replicaIdle is how long a copy goes without a frame before the collector
// asks the registry whether it is still needed.
const replicaIdle = 30 * time.Second

// collectReplicas drops copies nobody needs any more: of deleted streams,
// of streams this node now owns (a takeover uploads the copy first), and
// of streams whose new owner has finished its takeover (it writes the
// replica set of its epoch only after uploading what it pulled).
func (s *Service) collectReplicas(ctx context.Context) {
	rsets, ok := s.reg.(ReplicaSets)
	if !ok {
		return
	}
	type idle struct {
		id    uint64
		name  string
		epoch int64
	}
	var cands []idle
	s.replicas.mu.Lock()
	for id, r := range s.replicas.byID {
		if time.Since(r.touched) > replicaIdle {
			cands = append(cands, idle{id, r.name, r.epoch})
		}
	}
	s.replicas.mu.Unlock()
	for _, c := range cands {
		if c.name == "" {
			continue // a fence before any frame: nothing to keep
		}
		m, err := s.reg.GetStream(ctx, c.name)
		switch {
		case err == nil && m.ID == c.id && m.Epoch <= c.epoch && m.Owner != s.cfg.NodeID:
			continue // the owner we copy is still the owner
		case err == nil && m.ID == c.id && m.Epoch > c.epoch && m.Owner != s.cfg.NodeID:
			set, err := rsets.ReplicaSet(ctx, c.id)
			if err != nil || set.Epoch < m.Epoch {
				continue // the takeover may still need this copy
			}
		case err != nil && !isNotFound(err):
			continue
		case err == nil && m.ID == c.id && m.Owner == s.cfg.NodeID:
			if s.local(c.name) == nil {
				continue // not adopted yet: adopt reads this copy
			}
		}
		s.dropReplica(c.id)
		s.cfg.Logger.Info("dropped the replica of a stream no longer copied here", "stream", c.name, "id", c.id)
	}
}

func isNotFound(err error) bool { return errors.Is(err, metadata.ErrNotFound) }
