package share

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Share sessions (KIP-932): a member has one session per node it fetches
// from. Epoch 0 opens one (replacing any: the client dropped what it had,
// so the records it held go back to the pool), -1 closes it, and every
// other request names the epoch the previous answer led to; the
// partitions fetched are the session's, which requests add to and forget
// from.

type sessKey struct{ group, member string }

type session struct {
	epoch int32 // the epoch the next request must carry
	parts map[TP]struct{}
}

func nextEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// FetchSession applies the session part of a ShareFetch: add are the
// partitions the request lists, forget its forgotten ones. It returns the
// partitions to fetch (none when the request closes the session: final),
// the forgotten ones (the caller releases them after applying the
// request's acknowledgements), or the error for the whole request.
func (m *Manager) FetchSession(group, member string, epoch int32, add, forget []TP, hasAcks bool) (parts, forgotten []TP, final bool, err *kerr.Error) {
	k := sessKey{group, member}
	switch {
	case epoch == 0:
		if hasAcks {
			return nil, nil, false, kerr.InvalidRequest
		}
		m.mu.Lock()
		_, had := m.sessions[k]
		s := &session{epoch: 1, parts: map[TP]struct{}{}}
		for _, tp := range add {
			s.parts[tp] = struct{}{}
		}
		for _, tp := range forget {
			delete(s.parts, tp)
		}
		m.sessions[k] = s
		parts = sortedTPs(s.parts)
		m.mu.Unlock()
		if had {
			m.releaseMember(group, member, nil)
		}
		return parts, nil, false, nil
	case epoch == -1:
		return nil, nil, true, nil
	case epoch < -1:
		return nil, nil, false, kerr.InvalidShareSessionEpoch
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[k]
	if s == nil {
		return nil, nil, false, kerr.ShareSessionNotFound
	}
	if s.epoch != epoch {
		return nil, nil, false, kerr.InvalidShareSessionEpoch
	}
	s.epoch = nextEpoch(s.epoch)
	for _, tp := range add {
		s.parts[tp] = struct{}{}
	}
	for _, tp := range forget {
		if _, ok := s.parts[tp]; ok {
			delete(s.parts, tp)
			forgotten = append(forgotten, tp)
		}
	}
	return sortedTPs(s.parts), forgotten, false, nil
}

// AckSession applies the session part of a ShareAcknowledge: final when it
// closes the session (the caller then calls CloseSession).
func (m *Manager) AckSession(group, member string, epoch int32) (final bool, err *kerr.Error) {
	switch {
	case epoch == -1:
		return true, nil
	case epoch <= 0:
		return false, kerr.InvalidShareSessionEpoch
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessKey{group, member}]
	if s == nil {
		return false, kerr.ShareSessionNotFound
	}
	if s.epoch != epoch {
		return false, kerr.InvalidShareSessionEpoch
	}
	s.epoch = nextEpoch(s.epoch)
	return false, nil
}

// ReleaseParts returns member's records on the given partitions to the
// pool (they were forgotten from its session).
func (m *Manager) ReleaseParts(group, member string, parts []TP) {
	if len(parts) == 0 {
		return
	}
	only := map[TP]struct{}{}
	for _, tp := range parts {
		only[tp] = struct{}{}
	}
	m.releaseMember(group, member, only)
}

// CloseSession ends member's session and releases what it still holds.
func (m *Manager) CloseSession(group, member string) {
	m.closeSessions(group, member)
	m.releaseMember(group, member, nil)
}

func (m *Manager) closeSessions(group, member string) {
	m.mu.Lock()
	delete(m.sessions, sessKey{group, member})
	m.mu.Unlock()
}

func sortedTPs(set map[TP]struct{}) []TP {
	tps := slices.Collect(maps.Keys(set))
	slices.SortFunc(tps, func(a, b TP) int {
		if c := slices.Compare(a.TopicID[:], b.TopicID[:]); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return tps
}
