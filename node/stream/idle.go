package stream

// Idle streams in compact form (docs/benchmarks.md, "Stream density").
//
// On a node with many streams most of them are idle: created, and maybe
// never written. The full in-memory state of a stream (streamState, about
// half a kilobyte with its two map entries) is only needed once something
// uses it, so a stream whose whole state is its registry record is kept as
// that record, encoded (a few dozen bytes, one map entry), and its
// streamState is built on first use: an append, a read, a head, a delete,
// a fork of it, a hand-over or drain. Listing, describing and an identical
// re-create answer from the record without building anything.
//
// A stream qualifies ("plain") when its record is all there is: owned by
// this node, nothing of it in the WAL or in object storage, no offset
// reservation, no lifecycle (TTL, expiry, fork, fork references, soft
// delete or delete in progress), no retention, start offset 0, and local
// durability. Such a stream's Info is its record's with offsets 0 and
// open, exactly what a freshly built state would report. Open keeps plain
// streams idle and builds the others; a create of a plain stream leaves it
// idle. A stream, once built, stays built until it is unloaded. A rejoin
// after a lost lease re-checks the idle streams' ownership with one range
// read of the registry, as it checks the built ones.

import (
	"context"
	"fmt"
	"strings"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// idle maps a stream name to its flags byte followed by its registry
// record (metadata.EncodeStream), with the two most repeated strings left out.
type idleSet map[string]string

const (
	idleOwnerSelf  = 1 << 0 // the owner is this node (Owner not stored)
	idleDefaultCT  = 1 << 1 // content type application/octet-stream (not stored)
	defaultContent = "application/octet-stream"
)

// plain reports whether m, owned by this node, may be kept idle. The
// caller checks what the record does not show: WAL entries, object
// storage, reservations and forks reading it.
func (s *Service) plain(m metadata.Stream) bool {
	return (m.Owner == s.cfg.NodeID || m.Owner == "") &&
		m.TTLSeconds == 0 && m.ExpiresAt == nil && m.Fork == nil && m.ForkRefs == 0 &&
		!m.SoftDeleted && !m.Deleting && m.RetentionMs == 0 && m.RetentionBytes == 0 && m.Compaction == nil &&
		m.StartOffset == 0 && !s.objectDurableRecord(m)
}

// objectDurableRecord is objectDurable for a record.
func (s *Service) objectDurableRecord(m metadata.Stream) bool {
	d := m.Durability
	if d == "" {
		d = s.cfg.DefaultDurability
	}
	return s.tier != nil && d == DurabilityObject
}

// putIdleLocked keeps m idle. s.mu held for writing; m is plain and has no
// streamState.
func (s *Service) putIdleLocked(m metadata.Stream) {
	var flags byte
	if m.Owner == s.cfg.NodeID && m.Owner != "" {
		flags |= idleOwnerSelf
		m.Owner = ""
	}
	if m.ContentType == defaultContent {
		flags |= idleDefaultCT
		m.ContentType = ""
	}
	rec := make([]byte, 1, 40)
	rec[0] = flags
	rec = append(rec, metadata.EncodeStream(m)...)
	if s.idle == nil {
		s.idle = make(idleSet)
	}
	// A decoded name may share its memory with the whole etcd key.
	s.idle[strings.Clone(m.Name)] = string(rec)
}

// idleLocked returns the record of the idle stream name. s.mu held.
func (s *Service) idleLocked(name string) (metadata.Stream, bool) {
	rec, ok := s.idle[name]
	if !ok {
		return metadata.Stream{}, false
	}
	m, err := metadata.DecodeStream(name, []byte(rec[1:]))
	if err != nil {
		// It was encoded by this process: a bug, never bad input.
		panic(fmt.Sprintf("stream: idle record of %s: %v", name, err))
	}
	if rec[0]&idleOwnerSelf != 0 {
		m.Owner = s.cfg.NodeID
	}
	if rec[0]&idleDefaultCT != 0 {
		m.ContentType = defaultContent
	}
	return m, true
}

// idleInfo describes an idle stream: its record, no records yet.
func idleInfo(m metadata.Stream) Info {
	info := infoFromMeta(m)
	info.NextOffset = 0
	return info
}

// buildLocked turns the idle stream name into a loaded one, without an
// offset reservation (Open starts those itself); nil if it is not idle.
// s.mu held for writing.
func (s *Service) buildLocked(name string) *streamState {
	m, ok := s.idleLocked(name)
	if !ok {
		return nil
	}
	delete(s.idle, name)
	return s.insertLocked(m)
}

// localLocked is the loaded stream name, built first if it is idle. s.mu
// held for writing.
func (s *Service) localLocked(name string) *streamState {
	if st := s.byName[name]; st != nil {
		return st
	}
	st := s.buildLocked(name)
	if st != nil && s.resv != nil {
		// An idle stream never had offsets handed out: its
		// reservation starts empty, as at create.
		st.startReservation(metadata.Reservation{})
	}
	return st
}

// local is the loaded stream name (built if idle), or nil if this node
// does not hold it.
func (s *Service) local(name string) *streamState {
	s.mu.RLock()
	st := s.byName[name]
	idle := false
	if st == nil { // a built stream (every append's case) needs no second lookup
		_, idle = s.idle[name]
	}
	s.mu.RUnlock()
	if !idle {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.localLocked(name)
}

// describeLocal describes the stream name if this node holds it, without
// building an idle one.
func (s *Service) describeLocal(name string) (Info, bool) {
	s.mu.RLock()
	st := s.byName[name]
	var (
		m    metadata.Stream
		idle bool
	)
	if st == nil {
		m, idle = s.idleLocked(name)
	}
	s.mu.RUnlock()
	switch {
	case st != nil:
		return st.snapshot(), true
	case idle:
		return idleInfo(m), true
	}
	return Info{}, false
}

// buildAll builds every idle stream (a drain moves them all).
func (s *Service) buildAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.idle {
		s.localLocked(name)
	}
}

// streamCount is how many streams this node holds, idle ones included.
func (s *Service) streamCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byID) + len(s.idle)
}

// recheckIdle drops the idle streams whose record no longer makes them
// this node's (Rejoined: another node may have claimed them while this
// one had no lease). One range read of the registry, not a get per stream.
func (s *Service) recheckIdle(ctx context.Context) error {
	type held struct {
		id    uint64
		epoch int64
	} // all of a record the check needs
	s.mu.RLock()
	before := make(map[string]held, len(s.idle))
	for name := range s.idle {
		m, _ := s.idleLocked(name)
		before[name] = held{m.ID, m.Epoch}
	}
	s.mu.RUnlock()
	if len(before) == 0 {
		return nil
	}
	var still map[string]bool // idle streams the registry still gives this node
	err := s.reg.EachStream(ctx, func() { still = make(map[string]bool) }, func(m metadata.Stream) error {
		if was, ok := before[m.Name]; ok && m.ID == was.id && m.Owner == s.cfg.NodeID && m.Epoch == was.epoch {
			still[m.Name] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rejoin: check ownership of the idle streams: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, was := range before {
		if still[name] {
			continue
		}
		if cur, idle := s.idleLocked(name); idle && cur.ID == was.id {
			s.cfg.Logger.Warn("stream was taken over while this node had no lease; dropping it", "stream", name)
			delete(s.idle, name)
		}
	}
	return nil
}
