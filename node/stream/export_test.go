package stream

// HoldBackPublished makes the last n assigned offsets of name unpublished
// again, as they are between an `object` flush's commit in etcd and the
// moment this node applies it; the returned func publishes them. For
// testing reads in that window only.
func HoldBackPublished(s *Service, name string, n int64) (publish func()) {
	st := s.local(name)
	st.mu.Lock()
	end := st.hwm
	st.hwm -= n
	st.mu.Unlock()
	return func() { st.advance(end, false) }
}

// Idle reports whether the service keeps name as its record only
// (idle.go), not built.
func Idle(s *Service, name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.idle[name]
	return ok && s.byName[name] == nil
}

// ForgetManifests drops the service's cached manifest listing, as if it
// were old: the next history read through object storage lists anew.
func ForgetManifests(s *Service) {
	s.routing.mu.Lock()
	s.routing.manifests = nil
	s.routing.mu.Unlock()
}

// WakePending reports whether name has a wake channel (a waiter asked
// for one and no append has closed it yet).
func WakePending(s *Service, name string) bool {
	st := s.local(name)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.wake != nil
}
