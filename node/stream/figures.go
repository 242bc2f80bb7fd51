package stream

import "time"

// Figures are the node's storage figures the console's Cluster page shows
// for every node (docs/console.md): what is waiting for a flush, since
// when, and what the node's streams hold in object storage. They are read
// from counters the service keeps anyway; the object bytes walk the
// loaded streams' chunk lists (idle streams have nothing in object
// storage).
type Figures struct {
	// UnflushedBytes are WAL bytes not yet committed in object storage.
	UnflushedBytes int64
	// OldestUnflushed is when the oldest of those arrived; zero when
	// nothing waits. Its age is the flush lag.
	OldestUnflushed time.Time
	// ObjectBytes are the bytes in object storage of the ranges this
	// node's streams read their history from.
	ObjectBytes int64
	// Streams is how many streams this node owns (idle ones included).
	Streams int
}

// Figures returns the node's current figures.
func (s *Service) Figures() Figures {
	f := Figures{UnflushedBytes: s.pending.Load(), OldestUnflushed: s.oldestUnflushed()}
	s.mu.RLock()
	f.Streams = len(s.byID) + len(s.idle)
	loaded := make([]*streamState, 0, len(s.byID))
	for _, st := range s.byID {
		loaded = append(loaded, st)
	}
	s.mu.RUnlock()
	for _, st := range loaded {
		f.ObjectBytes += st.objectBytes()
	}
	return f
}

// oldestUnflushed is when the oldest append not yet taken by a flush
// arrived; zero when nothing waits.
func (s *Service) oldestUnflushed() time.Time {
	if since := s.pendingSince.Load(); since != 0 && s.pending.Load() > 0 {
		return time.Unix(0, since)
	}
	return time.Time{}
}

// objectBytes sums the object ranges of the stream's chunks, each range
// once (consecutive chunks may share one).
func (st *streamState) objectBytes() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var n int64
	var last *ObjectRef
	for i := range st.chunks {
		o := st.chunks[i].obj
		if o == nil || o == last || (last != nil && o.Key == last.Key && o.Offset == last.Offset) {
			continue
		}
		n += o.Length
		last = o
	}
	return n
}
