package stream

// HoldBackPublished makes the last n assigned offsets of name unpublished
// again, as they are between an `object` flush's commit in etcd and the
// moment this node applies it; the returned func publishes them. For
// testing reads in that window only.
func HoldBackPublished(s *Service, name string, n int64) (publish func()) {
	s.mu.RLock()
	st := s.byName[name]
	s.mu.RUnlock()
	st.mu.Lock()
	end := st.hwm
	st.hwm -= n
	st.mu.Unlock()
	return func() { st.advance(end, false) }
}
