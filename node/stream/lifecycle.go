package stream

// Stream lifecycle beyond create/append/delete: expiry (a sliding TTL or an
// absolute Expires-At), soft delete, and the fork references that decide
// between a soft and a hard delete. The Durable Streams facade needs all of
// it, but none of it is protocol specific: a stream created with a TTL
// expires the same way whichever protocol reads it.
//
// What is stored where:
//   - the TTL window, Expires-At, fork link, ForkRefs, SoftDeleted and
//     Deleting live in the stream's registry record (metadata.Stream), written
//     only at create, delete, fork create/delete and expiry — never per
//     read or append;
//   - the sliding TTL's last access is kept in memory only. After a restart
//     the idle clock starts again at the node's start, so a restart can
//     lengthen a stream's life by at most one TTL but never shortens it.
//
// Expiry is lazy and eager at once: lookup treats an expired stream as
// absent the moment it expires, and a reaper makes that durable within a
// second (deletes it, or soft-deletes it while forks still read it), so an
// expired stream cannot come back to life after a restart.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// ErrGone is returned for a stream that was deleted (or expired) while forks
// still read its history: it is gone for clients, but its name stays taken
// and its data kept until the last fork is deleted. It also matches
// ErrNotFound, so frontends that do not distinguish the two answer 404.
var ErrGone error = goneError{}

type goneError struct{}

func (goneError) Error() string { return "stream: gone (deleted; its history is kept for its forks)" }

// Is makes errors.Is(ErrGone, ErrNotFound) true.
func (goneError) Is(target error) bool { return target == ErrNotFound }

// lifecycle is the per-stream part, embedded in streamState.
type lifecycle struct {
	ttl time.Duration // sliding; 0 = none
	// expiresAt is the record's absolute expiry (shared with it, never
	// changed); nil = none.
	expiresAt *time.Time
	// lastAccess is the unix-nano time of the last read or append.
	lastAccess atomic.Int64

	mu          sync.Mutex
	softDeleted bool
	deleting    bool
	refs        int64 // mirror of metadata.Stream.ForkRefs
}

// expiry is the absolute expiry, zero if none.
func (l *lifecycle) expiry() time.Time {
	if l.expiresAt == nil {
		return time.Time{}
	}
	return *l.expiresAt
}

func (l *lifecycle) touch(now time.Time) {
	if l.ttl > 0 {
		l.lastAccess.Store(now.UnixNano())
	}
}

func (l *lifecycle) expiring() bool { return l.ttl > 0 || !l.expiry().IsZero() }

func (l *lifecycle) expired(now time.Time) bool {
	if e := l.expiry(); !e.IsZero() && !now.Before(e) {
		return true
	}
	return l.ttl > 0 && now.UnixNano()-l.lastAccess.Load() >= int64(l.ttl)
}

// lifeSet is the service-wide part: the streams that can expire, so the
// reaper never walks streams without an expiry.
type lifeSet struct {
	mu       sync.Mutex
	expiring map[*streamState]struct{}
}

func (ls *lifeSet) add(st *streamState) {
	ls.mu.Lock()
	if ls.expiring == nil {
		ls.expiring = make(map[*streamState]struct{})
	}
	ls.expiring[st] = struct{}{}
	ls.mu.Unlock()
}

func (ls *lifeSet) remove(st *streamState) {
	ls.mu.Lock()
	delete(ls.expiring, st)
	ls.mu.Unlock()
}

func (ls *lifeSet) snapshot() []*streamState {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]*streamState, 0, len(ls.expiring))
	for st := range ls.expiring {
		out = append(out, st)
	}
	return out
}

// initLifecycle sets up a freshly inserted streamState from its registry
// record: a fork's own log starts at its fork point, and the idle clock of a
// TTL starts now.
func (s *Service) initLifecycle(st *streamState) {
	m := st.info
	if m.Fork != nil {
		// Nothing below the fork point is this stream's to write or
		// upload: its own log (and its object ranges) start there.
		st.next, st.hwm, st.uploaded = m.Fork.End, m.Fork.End, m.Fork.End
	}
	l := &st.life
	l.ttl = time.Duration(m.TTLSeconds) * time.Second
	l.expiresAt = m.ExpiresAt
	l.lastAccess.Store(s.cfg.Now().UnixNano())
	l.refs, l.softDeleted, l.deleting = m.ForkRefs, m.SoftDeleted, m.Deleting
	if l.expiring() && !m.SoftDeleted {
		s.life.add(st)
	}
}

// gate decides whether a stream that exists in memory is visible to
// clients: soft-deleted streams are gone, streams being deleted are absent,
// and expired streams are absent (or gone while forks still read them).
func (s *Service) gate(st *streamState) error {
	l := &st.life
	l.mu.Lock()
	soft, deleting, refs := l.softDeleted, l.deleting, l.refs
	l.mu.Unlock()
	switch {
	case deleting:
		return fmt.Errorf("%w: %s", ErrNotFound, st.info.Name)
	case soft:
		return fmt.Errorf("%w: %s", ErrGone, st.info.Name)
	case l.expiring() && l.expired(s.cfg.Now()):
		if refs > 0 {
			return fmt.Errorf("%w: %s expired", ErrGone, st.info.Name)
		}
		return fmt.Errorf("%w: %s expired", ErrNotFound, st.info.Name)
	}
	return nil
}

// Touch counts as a read for the sliding TTL (a Durable Streams
// offset=now read touches the stream without reading) and returns the
// stream's info.
func (s *Service) Touch(ctx context.Context, name string) (Info, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return Info{}, err
	}
	st.life.touch(s.cfg.Now())
	return st.snapshot(), nil
}

// createPlan carries what prepareCreate resolved into the registry record
// and the create's outcome handling.
type createPlan struct {
	ttlSeconds int64
	expiresAt  *time.Time
	fork       *metadata.StreamFork
	// forkOffsetGiven: the client named the fork point; a repeated create
	// that omits it matches whatever point the first one resolved.
	forkOffsetGiven bool
	src             *streamState // fork source holding a reference taken for this create
	// forkStart is the fork's start offset: its source's when forked, so
	// the fork never offers records its source had already trimmed (and
	// garbage collection may have deleted).
	forkStart int64
}

// prepareCreate validates the lifecycle options, frees the name of an
// expired stream, and resolves a fork (inheriting its content type and
// expiry). It may fill opts.ContentType, TTL and ExpiresAt from a fork
// source. The fork's reference is taken later, by begin.
func (s *Service) prepareCreate(ctx context.Context, name string, opts *CreateOptions) (*createPlan, error) {
	if opts.TTL < 0 {
		return nil, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if opts.TTL%time.Second != 0 {
		return nil, fmt.Errorf("%w: TTL %s is not whole seconds", ErrInvalidArgument, opts.TTL)
	}
	if opts.TTL > 0 && !opts.ExpiresAt.IsZero() {
		return nil, fmt.Errorf("%w: a stream has a TTL or an expiry time, not both", ErrInvalidArgument)
	}
	s.mu.RLock()
	existing := s.byName[name]
	s.mu.RUnlock()
	if existing != nil {
		if err := s.reapIfExpired(ctx, existing); err != nil {
			return nil, err
		}
	}
	plan := &createPlan{}
	if opts.Fork != nil {
		if err := s.resolveFork(ctx, opts, plan); err != nil {
			return nil, err
		}
	}
	plan.ttlSeconds = int64(opts.TTL / time.Second)
	if !opts.ExpiresAt.IsZero() {
		t := opts.ExpiresAt.UTC()
		plan.expiresAt = &t
	}
	return plan, nil
}

// begin takes the fork's reference on its source, right before the fork's
// record is created.
func (p *createPlan) begin(ctx context.Context, s *Service) error {
	if p.src == nil {
		return nil
	}
	if err := s.takeRef(ctx, p.src); err != nil {
		p.src = nil
		return err
	}
	return nil
}

// apply adds the plan's lifecycle fields to the record about to be created.
func (p *createPlan) apply(m metadata.Stream) metadata.Stream {
	m.TTLSeconds = p.ttlSeconds
	m.ExpiresAt = p.expiresAt
	m.Fork = p.fork
	if p.fork != nil {
		m.StartOffset = max(m.StartOffset, p.forkStart)
	}
	return m
}

// undo gives back the source reference of a create that created nothing.
func (p *createPlan) undo(ctx context.Context, s *Service) {
	if p.src == nil {
		return
	}
	src := p.src
	p.src = nil
	if err := s.releaseRef(ctx, src.info.Name, src.info.ID); err != nil {
		// A leaked reference only keeps a deleted source's data longer;
		// Reconcile (at start-up) recounts references from the registry.
		s.cfg.Logger.Warn("fork reference not released", "source", src.info.Name, "err", err)
	}
}

// sameConfig decides whether an existing stream matches a create: content
// type, TTL or expiry, closure, and fork parameters.
func (s *Service) sameConfig(stored metadata.Stream, ct string, opts CreateOptions, plan *createPlan) error {
	conflict := func(what string) error {
		return fmt.Errorf("%w: %s exists with a different %s", ErrConflict, stored.Name, what)
	}
	if stored.SoftDeleted {
		return fmt.Errorf("%w: %s was deleted but its history is kept for its forks; the name is taken until they are gone", ErrConflict, stored.Name)
	}
	if stored.Deleting {
		return fmt.Errorf("%w: %s", errBeingDeleted, stored.Name)
	}
	if !SameContentType(stored.ContentType, ct) {
		return fmt.Errorf("%w: %q has content type %q, not %q", ErrConflict, stored.Name, stored.ContentType, ct)
	}
	if stored.TTLSeconds != plan.ttlSeconds {
		return conflict("TTL")
	}
	if (stored.ExpiresAt == nil) != (plan.expiresAt == nil) ||
		(stored.ExpiresAt != nil && !stored.ExpiresAt.Equal(*plan.expiresAt)) {
		return conflict("expiry time")
	}
	if (stored.Fork == nil) != (plan.fork == nil) {
		return conflict("fork source")
	}
	if f := stored.Fork; f != nil {
		if f.Source != plan.fork.Source || f.SubOffset != plan.fork.SubOffset ||
			(plan.forkOffsetGiven && f.Offset != plan.fork.Offset) {
			return conflict("fork point")
		}
	}
	s.mu.RLock()
	st := s.byName[stored.Name]
	s.mu.RUnlock()
	closed := false
	if st != nil && st.info.ID == stored.ID {
		st.mu.Lock()
		closed = st.closed || st.closedVisible
		st.mu.Unlock()
	}
	if closed != opts.Closed {
		if closed {
			return conflict("closure status (it is closed)")
		}
		return conflict("closure status (it is open)")
	}
	return nil
}

// finishCreate writes a new stream's initial records and closes it if asked,
// as one append.
func (s *Service) finishCreate(ctx context.Context, name string, opts CreateOptions) error {
	if len(opts.Initial) == 0 && !opts.Closed {
		return nil
	}
	_, err := s.AppendBatch(ctx, name, AppendRequest{Records: opts.Initial, Close: opts.Closed})
	return err
}

// takeRef records a new fork's reference on its source, refusing a source
// that is soft-deleted or being deleted. It runs before the fork's record is
// created, so a crash in between leaks a reference (repaired at start)
// rather than leaving a fork whose source could be deleted under it.
func (s *Service) takeRef(ctx context.Context, src *streamState) error {
	s.refChanges.Add(1)
	name, id := src.info.Name, src.info.ID
	stored, err := s.updateRecord(ctx, name, func(m *metadata.Stream) error {
		switch {
		case m.ID != id:
			return fmt.Errorf("%w: fork source %s was replaced", ErrNotFound, name)
		case m.SoftDeleted:
			return fmt.Errorf("%w: fork source %s was deleted (its history is kept for its forks)", ErrConflict, name)
		case m.Deleting:
			return fmt.Errorf("%w: fork source %s is being deleted", ErrNotFound, name)
		}
		m.ForkRefs++
		return nil
	})
	if err != nil {
		return err
	}
	src.life.mu.Lock()
	src.life.refs = stored.ForkRefs
	src.life.mu.Unlock()
	return nil
}

// releaseRef drops one fork reference on the source (name, id) and, when
// that was the last reference of a soft-deleted source, deletes the source
// for real, which in turn releases its own source (cascading GC).
func (s *Service) releaseRef(ctx context.Context, name string, id uint64) error {
	s.refChanges.Add(1)
	stored, err := s.updateRecord(ctx, name, func(m *metadata.Stream) error {
		if m.ID != id {
			return errStale
		}
		if m.ForkRefs > 0 {
			m.ForkRefs--
		}
		return nil
	})
	if errors.Is(err, errStale) || errors.Is(err, ErrNotFound) {
		return nil // the source is already gone
	}
	if err != nil {
		return err
	}
	s.mu.RLock()
	src := s.byID[id]
	s.mu.RUnlock()
	if src == nil {
		return nil
	}
	src.life.mu.Lock()
	src.life.refs = stored.ForkRefs
	src.life.mu.Unlock()
	if stored.SoftDeleted && stored.ForkRefs == 0 {
		return s.purge(ctx, src)
	}
	return nil
}

var errStale = errors.New("stream: registry record belongs to another incarnation")

// updateRecord is a conditional read-modify-write of a registry record.
// An error from fn is returned as is; a topic alias taken by another
// stream is ErrTopicConflict.
func (s *Service) updateRecord(ctx context.Context, name string, fn func(*metadata.Stream) error) (metadata.Stream, error) {
	u, ok := s.reg.(interface {
		UpdateStream(ctx context.Context, name string, fn func(*metadata.Stream) error) (metadata.Stream, error)
	})
	if !ok {
		return metadata.Stream{}, fmt.Errorf("%w: the registry cannot update streams", ErrUnavailable)
	}
	var fnErr error
	stored, err := u.UpdateStream(ctx, name, func(m *metadata.Stream) error {
		fnErr = fn(m)
		return fnErr
	})
	switch {
	case err == nil:
		return stored, nil
	case fnErr != nil:
		return metadata.Stream{}, fnErr
	case errors.Is(err, metadata.ErrTopicTaken):
		return metadata.Stream{}, fmt.Errorf("%w: %v", ErrTopicConflict, err)
	case errors.Is(err, metadata.ErrNotFound):
		return metadata.Stream{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return metadata.Stream{}, fmt.Errorf("%w: registry update %q: %v", ErrUnavailable, name, err)
}

// beginDelete is the first step of every delete: one conditional registry
// write decides between a soft delete (forks still read the stream) and a
// real one (marked Deleting, so no fork can take a reference from now on).
// soft=true means the stream is now soft-deleted and nothing else is to do.
func (s *Service) beginDelete(ctx context.Context, st *streamState) (soft bool, err error) {
	name, id := st.info.Name, st.info.ID
	stored, err := s.updateRecord(ctx, name, func(m *metadata.Stream) error {
		if m.ID != id {
			return fmt.Errorf("%w: %s was replaced by a newer stream of the same name", ErrConflict, name)
		}
		if m.SoftDeleted {
			return fmt.Errorf("%w: %s", ErrGone, name)
		}
		if m.ForkRefs > 0 {
			m.SoftDeleted = true
		} else {
			m.Deleting = true
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	st.life.mu.Lock()
	st.life.refs, st.life.softDeleted, st.life.deleting = stored.ForkRefs, stored.SoftDeleted, stored.Deleting
	st.life.mu.Unlock()
	if stored.SoftDeleted {
		s.life.remove(st)
		st.wakeAll()
		return true, nil
	}
	return false, nil
}

// afterDelete runs once a stream's registry record is gone: it stops
// tracking its expiry and releases the stream's reference on its fork
// source.
func (s *Service) afterDelete(ctx context.Context, st *streamState) {
	s.life.remove(st)
	if f := st.info.Fork; f != nil {
		if err := s.releaseRef(ctx, f.Source, f.SourceID); err != nil {
			s.cfg.Logger.Warn("fork reference not released", "source", f.Source, "fork", st.info.Name, "err", err)
		}
	}
}

// remove deletes st the way a client DELETE does, for the reaper and for
// creates that find an expired stream under their name.
func (s *Service) remove(ctx context.Context, st *streamState) error {
	soft, err := s.beginDelete(ctx, st)
	if err != nil || soft {
		return err
	}
	return s.purge(ctx, st)
}

// purge removes a stream's registry record and in-memory state, then
// releases its fork reference. Its WAL entries become garbage that replay
// skips, as for any deleted stream.
func (s *Service) purge(ctx context.Context, st *streamState) error {
	name, id := st.info.Name, st.info.ID
	if err := s.reg.DeleteStream(ctx, name, id); err != nil && !errors.Is(err, metadata.ErrNotFound) {
		if errors.Is(err, metadata.ErrConflict) {
			return nil // a newer incarnation owns the name; ours is gone
		}
		return fmt.Errorf("%w: registry delete %q: %v", ErrUnavailable, name, err)
	}
	s.retire(st)
	s.afterDelete(ctx, st)
	return nil
}

// wakeAll wakes the stream's long-poll waiters so they re-check its state.
func (st *streamState) wakeAll() {
	st.mu.Lock()
	st.wakeReadersLocked()
	st.mu.Unlock()
}

// reapIfExpired deletes (or soft-deletes) st if it has expired.
func (s *Service) reapIfExpired(ctx context.Context, st *streamState) error {
	l := &st.life
	if !l.expiring() || !l.expired(s.cfg.Now()) {
		return nil
	}
	l.mu.Lock()
	done := l.softDeleted || l.deleting
	l.mu.Unlock()
	if done {
		return nil
	}
	err := s.remove(ctx, st)
	if errors.Is(err, ErrGone) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// LifecycleOptions tune RunReaper.
type LifecycleOptions struct {
	// ReapInterval is how often expired streams are deleted for good
	// (default 1s). Lookups hide them at once either way.
	ReapInterval time.Duration
}

// Reconcile repairs what a crash may have left half done (deletes in
// progress, leaked fork references, soft-deleted streams without forks).
// Call it once after Open, before RunReaper.
func (s *Service) Reconcile(ctx context.Context) error {
	return s.reconcile(ctx)
}

// RunReaper deletes expired streams for good every opts.ReapInterval until
// ctx is done (a job: see Jobs). Stop it before closing the WAL.
func (s *Service) RunReaper(ctx context.Context, opts LifecycleOptions) error {
	if opts.ReapInterval <= 0 {
		opts.ReapInterval = time.Second
	}
	every(ctx, opts.ReapInterval, s.reap)
	return nil
}

// reap makes expiry durable for every stream that has expired.
func (s *Service) reap(ctx context.Context) {
	for _, st := range s.life.snapshot() {
		if ctx.Err() != nil {
			return
		}
		if err := s.reapIfExpired(ctx, st); err != nil {
			s.cfg.Logger.Warn("expired stream not deleted yet; will retry", "stream", st.info.Name, "err", err)
		}
	}
}

// reconcile brings registry and memory back in line after a crash.
func (s *Service) reconcile(ctx context.Context) error {
	all := s.loaded()
	// 1. Finish deletes that were decided but not done.
	for _, st := range all {
		if st.info.Deleting {
			if err := s.purge(ctx, st); err != nil {
				return fmt.Errorf("stream: finish delete of %s: %w", st.info.Name, err)
			}
		}
	}
	// 2. Recount fork references from the fork records themselves — all
	// of them, wherever their forks are served — and repair the counts of
	// the streams this node holds.
	actual := s.openForks
	s.openForks = nil
	if actual == nil || s.refChanges.Load() != 0 {
		err := s.reg.EachStream(ctx, func() { actual = make(map[uint64]int64) }, func(m metadata.Stream) error {
			if m.Fork != nil {
				actual[m.Fork.SourceID]++
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("stream: recount fork references: %w", err)
		}
	}
	live := s.loaded()
	for _, st := range live {
		st.life.mu.Lock()
		have := st.life.refs
		st.life.mu.Unlock()
		want := actual[st.info.ID]
		if have == want {
			continue
		}
		s.cfg.Logger.Warn("repairing fork reference count", "stream", st.info.Name, "stored", have, "actual", want)
		id := st.info.ID
		stored, err := s.updateRecord(ctx, st.info.Name, func(m *metadata.Stream) error {
			if m.ID != id {
				return errStale
			}
			m.ForkRefs = want
			return nil
		})
		if err != nil && !errors.Is(err, errStale) {
			return fmt.Errorf("stream: repair references of %s: %w", st.info.Name, err)
		}
		if err == nil {
			st.life.mu.Lock()
			st.life.refs = stored.ForkRefs
			st.life.mu.Unlock()
		}
	}
	// 3. Soft-deleted streams nobody reads any more; 4. expired streams.
	for _, st := range live {
		st.life.mu.Lock()
		orphan := st.life.softDeleted && st.life.refs == 0
		st.life.mu.Unlock()
		if orphan {
			if err := s.purge(ctx, st); err != nil {
				return fmt.Errorf("stream: delete %s: %w", st.info.Name, err)
			}
		}
	}
	s.reap(ctx)
	return nil
}

// errBeingDeleted: a create met the previous incarnation of the name while
// its deletion (an expired TTL, a DELETE) is finishing. Create waits for it
// rather than answering 503: the deletion is a few etcd transactions away.
var errBeingDeleted = fmt.Errorf("%w: the previous stream of this name is being deleted", ErrUnavailable)
