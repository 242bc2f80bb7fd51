package stream

// Offset reservations: an offset, once handed out, never names another
// record (docs/durability.md, "Offsets are never reused").
//
// An owner writes a reservation (metadata.Reservation) in etcd before any
// record at an offset at or above the previous one is acknowledged or
// readable, and a node that takes the stream over starts at the end of the
// reservation instead of at the end of what object storage holds. With
// `local` durability an owner lost for good takes the records it had not
// uploaded with it; their offsets stay a gap, which readers are moved past,
// instead of being handed out again for other records.
//
// Reservations run ahead of the appends: a stream asks for the next one
// when half of the current one is used, sized to about two seconds of its
// append rate (at least minReserve offsets), and one goroutine writes the
// requests of every stream in one etcd transaction. A round also extends
// every other stream that has used a quarter of its reservation, so busy
// streams fall into step and share transactions: in steady state a node
// writes about one reservation transaction a second, not one per stream
// (each is an fsync of etcd's, on the disk the WAL syncs on). An append
// waits only when it outruns the reservation (the first append after a
// takeover or a create, or a burst faster than the refill).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
)

const (
	minReserve = 1024
	maxReserve = 1 << 22
	// reserveAhead is how much of its append rate a reservation covers.
	reserveAhead = 2 * time.Second
	// minRateWindow is the shortest time over which an append rate is
	// measured: a reservation whose half is used up faster than this
	// grows about reserveAhead/minRateWindow/2 (4x) per extension, so a
	// burst right after a create does not reserve millions of offsets,
	// while a steady rate is reached in a few extensions (measured over a
	// whole second, the reservation never grew past minReserve: extended
	// every ahead/2R seconds, it measured exactly that again).
	minRateWindow = 250 * time.Millisecond
)

// Reservations is what offset reservations need from the registry
// (meta.Registry).
type Reservations interface {
	Reservation(ctx context.Context, id uint64) (metadata.Reservation, error)
	Reservations(ctx context.Context) (map[uint64]metadata.Reservation, error)
	Reserve(ctx context.Context, sess metadata.Lease, ops []metadata.ReserveOp) (int64, error)
}

// reservation is a stream's side of it; guarded by streamState.mu.
type reservation struct {
	on     bool  // kept for this stream (the service has a registry)
	base   int64 // first offset of this owner's epoch
	end    int64 // offsets below may be handed out
	rev    int64 // the key's mod revision, for the next write
	queued bool  // the reserver will extend it
	wake   chan struct{}
	gen    uint64 // rounds finished for this stream
	err    error  // of the last round, if it failed
	from   int64  // st.next at the last extension
	at     time.Time
	own    bool // started from a reservation of this epoch (a restart)
}

// floorAtStartLocked moves next up to the stream's start offset when
// what this node rebuilt (manifests, WAL) ends below it. Offsets below the
// start were handed out and trimmed, and their objects may be collected,
// so an owner back with an empty disk, or a new owner reading an empty
// listing, would otherwise count from 0 again: hand out offsets a second
// time, and answer a read at the start offset with "out of range
// [start, 0]" (the soak of 2026-12-05 found it). The stretch becomes a
// gap, as a lost tail does. st.mu held or st not shared yet.
func (st *streamState) floorAtStartLocked() {
	start := st.info.StartOffset
	if st.next >= start {
		return
	}
	st.chunks = append(st.chunks, chunk{base: st.next, next: start, gap: true})
	st.next = start
	st.hwm = max(st.hwm, start)
	st.checkInvariantsLocked()
}

// startReservation sets where this node's offsets of st begin, from the
// stream's reservation res (Rev 0: none) and st.next, the end of what
// object storage holds: a reservation of an earlier epoch means another
// owner may have handed out offsets up to its end, so the stream resumes
// there and [st.next, End) becomes a gap; one of this epoch is this node's
// own (it restarted), and its base is where the epoch began. st.mu held or
// st not shared yet; before the WAL is replayed on top.
func (st *streamState) startReservation(res metadata.Reservation) {
	st.res = reservation{on: true, rev: res.Rev, wake: make(chan struct{}), at: time.Now()}
	own := res.Rev != 0 && res.Epoch == st.info.Epoch
	st.res.own = own
	floor := st.next
	switch {
	case own:
		floor, st.res.end = max(floor, res.Base), res.End
	case res.Rev != 0:
		floor = max(floor, res.End)
	}
	if floor > st.next {
		st.chunks = append(st.chunks, chunk{base: st.next, next: floor, gap: true})
		st.next, st.hwm = floor, floor
		st.checkInvariantsLocked()
	}
	st.res.base = floor
	if own {
		st.res.base = res.Base
	}
	st.res.from = st.next
}

// lostDisk is res as a node with a fresh WAL (Config.FreshLog) must take
// it: one of its own epoch was written by an incarnation whose disk is
// gone, so it is treated as another owner's (its offsets become a gap).
func (s *Service) lostDisk(res metadata.Reservation) metadata.Reservation {
	if s.cfg.FreshLog && res.Rev != 0 {
		res.Epoch = -1
	}
	return res
}

// reserveNeed notes an append that took offsets up to end: it reports
// whether the append must wait for the reservation, and queues an
// extension when half of the reservation is used. st.mu held.
func (s *Service) reserveNeed(st *streamState, end int64) (wait, kick bool) {
	if !st.res.on {
		return false, false
	}
	ahead := max(st.res.end-st.res.from, minReserve)
	if !st.res.queued && end+ahead/2 > st.res.end {
		st.res.queued, kick = true, true
	}
	return end > st.res.end, kick
}

func (s *Service) kickReserver() {
	select {
	case s.resKick <- struct{}{}:
	default:
	}
}

// waitReserved blocks until offsets below end are reserved.
func (s *Service) waitReserved(ctx context.Context, st *streamState, end int64) error {
	st.mu.Lock()
	gen := st.res.gen
	st.mu.Unlock()
	var waited time.Time
	defer func() {
		if !waited.IsZero() {
			s.metrics.reserveWaits.Inc()
			s.metrics.reserveWaitSeconds.Add(time.Since(waited).Seconds())
		}
	}()
	for {
		st.mu.Lock()
		ok, wake, deleted, err, done := st.res.end >= end, st.res.wake, st.deleted, st.res.err, st.res.gen != gen
		kick := false
		if !ok && !st.res.queued {
			st.res.queued, kick = true, true
		}
		st.mu.Unlock()
		switch {
		case ok:
			return nil
		case deleted:
			return fmt.Errorf("%w: %s", ErrNotFound, st.info.Name)
		case done && err != nil:
			return fmt.Errorf("%w: reserving offsets in etcd: %v", ErrUnavailable, err)
		}
		s.mu.RLock()
		fenced := s.fenced
		s.mu.RUnlock()
		if fenced != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, fenced)
		}
		if kick {
			s.kickReserver()
		}
		if waited.IsZero() {
			waited = time.Now()
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runReserver writes queued reservations until ctx is done.
func (s *Service) runReserver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.resKick:
		}
		if err := s.reserveRound(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("reserving offsets in etcd failed", "err", err)
			select { // a failing etcd is not hammered; waiters retry
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// reserveRound extends every queued stream's reservation, and that of
// every stream that has used a quarter of its own (it would queue soon:
// extending it now shares this transaction instead of costing another),
// MaxReserveOps streams per etcd transaction.
func (s *Service) reserveRound(ctx context.Context) error {
	var queued, soon []*streamState
	for _, st := range s.loaded() {
		st.mu.Lock()
		switch {
		case st.deleted:
		case st.res.queued:
			queued = append(queued, st)
		case st.res.on && st.res.end > st.res.from && st.next-st.res.from >= (st.res.end-st.res.from)/4 && !s.objectDurable(st):
			soon = append(soon, st)
		}
		st.mu.Unlock()
	}
	if len(queued) == 0 {
		return nil
	}
	return s.reserveInTxns(ctx, append(queued, soon...), true)
}

// reserveInTxns extends the reservations of streams in id order,
// MaxReserveOps streams per etcd transaction. A failed transaction ends
// it, unless keepGoing: then the rest are still tried and the errors
// joined.
func (s *Service) reserveInTxns(ctx context.Context, streams []*streamState, keepGoing bool) error {
	sort.Slice(streams, func(i, j int) bool { return streams[i].info.ID < streams[j].info.ID })
	var errs []error
	for len(streams) > 0 {
		n := min(len(streams), metadata.MaxReserveOps)
		if err := s.reserve(ctx, streams[:n], false); err != nil {
			if !keepGoing {
				return err
			}
			errs = append(errs, err)
		}
		streams = streams[n:]
	}
	return errors.Join(errs...)
}

// reserve writes one transaction of reservations for streams: extended
// ahead of each stream's next offset, or with release, ended exactly at
// it (a drain, after everything was uploaded: the next owner continues
// without a gap). Waiters are woken either way.
func (s *Service) reserve(ctx context.Context, streams []*streamState, release bool) error {
	now := time.Now()
	ops := make([]metadata.ReserveOp, len(streams))
	for i, st := range streams {
		st.mu.Lock()
		end := st.next
		if !release {
			// About reserveAhead of the stream's append rate since the
			// last extension, measured over at least minRateWindow.
			ahead := int64(minReserve)
			if st.next > st.res.from {
				dt := max(now.Sub(st.res.at), minRateWindow)
				rate := float64(st.next-st.res.from) / dt.Seconds()
				ahead = min(max(ahead, int64(rate*reserveAhead.Seconds())), maxReserve)
			}
			end = max(st.next+ahead, st.res.end)
		}
		ops[i] = metadata.ReserveOp{StreamID: st.info.ID, Prev: st.res.rev,
			Res: metadata.Reservation{Epoch: st.info.Epoch, Base: st.res.base, End: end}}
		st.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev, err := s.resv.Reserve(rctx, s.session(), ops)
	s.metrics.reserveTxns.Inc()
	if errors.Is(err, metadata.ErrLeaseLost) && s.session() != nil && s.session().Lost() {
		s.fence(err)
	}
	var reread map[uint64]metadata.Reservation
	if err != nil && !errors.Is(err, metadata.ErrLeaseLost) {
		// A key changed under us, or the outcome is unknown (it may have
		// been applied): read them back before the next try.
		reread = map[uint64]metadata.Reservation{}
		for _, st := range streams {
			if r, gerr := s.resv.Reservation(rctx, st.info.ID); gerr == nil {
				reread[st.info.ID] = r
			}
		}
	}
	for i, st := range streams {
		st.mu.Lock()
		if err == nil {
			st.res.end, st.res.rev, st.res.err = ops[i].Res.End, rev, nil
			st.res.from, st.res.at = st.next, now
		} else {
			st.res.err = err
			if r, ok := reread[st.info.ID]; ok {
				if r.Epoch == st.info.Epoch && r.Base == st.res.base {
					// Our own write after all (an unknown outcome).
					st.res.rev, st.res.end = r.Rev, max(st.res.end, min(r.End, ops[i].Res.End))
				} else if r.Epoch < st.info.Epoch {
					st.res.rev = r.Rev // a predecessor's: ours replaces it
				} else {
					st.res.err = fmt.Errorf("%w: stream %s was taken over (epoch %d)", metadata.ErrConflict, st.info.Name, r.Epoch)
				}
			}
		}
		st.res.queued = false
		st.res.gen++
		close(st.res.wake)
		st.res.wake = make(chan struct{})
		st.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("reserve offsets of %d streams: %w", len(streams), err)
	}
	return nil
}

// reserveLoaded makes sure every loaded stream's offsets up to its end are
// reserved: after the WAL was replayed, records nobody could read before
// the restart (written, then the node died waiting for a reservation)
// become readable, so they must be covered first.
func (s *Service) reserveLoaded(ctx context.Context) error {
	var need []*streamState
	for _, st := range s.byID {
		if st.res.on && st.next > st.res.end && !s.objectDurable(st) {
			need = append(need, st)
		}
	}
	return s.reserveInTxns(ctx, need, false)
}
