package stream

import "sort"

// LocalBytes is the stored size of a stream this node serves: the bytes
// of its retained history in the WAL and in objects (what Kafka's
// DescribeLogDirs reports as a partition's size). ok is false when the
// stream is not served here.
func (s *Service) LocalBytes(name string) (n int64, ok bool) {
	st := s.local(name)
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	first := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > st.info.StartOffset })
	for i := first; i < len(st.chunks); i++ {
		if !st.chunks[i].gap {
			n += chunkBytes(&st.chunks[i])
		}
	}
	return n, true
}
