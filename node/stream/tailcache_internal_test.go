package stream

import (
	"bytes"
	"testing"

	"github.com/PicoMQ/picomq/wal"
)

// TestTailCachePutAllocations: holding a small batch (a live tail's one
// 100 B record) is one allocation, entry and bytes together; it used to
// be two. Every size still reads back as the bytes put, a copy.
func TestTailCachePutAllocations(t *testing.T) {
	var c tailCache
	small := bytes.Repeat([]byte{'s'}, 170)
	pos := wal.Pos{Segment: 1, Offset: 64, Len: int32(len(small))}
	if n := testing.AllocsPerRun(100, func() { c.put(7, pos, small) }); n != 1 {
		t.Fatalf("put of a %d-byte batch allocates %v times, want 1", len(small), n)
	}
	for i, size := range []int{1, tailSmallBatch - 1, tailSmallBatch, tailSmallBatch + 1, tailCacheMaxBatch} {
		b := bytes.Repeat([]byte{byte('a' + i)}, size)
		p := wal.Pos{Segment: 1, Offset: int64(100 * (i + 1)), Len: int32(size)}
		c.put(9, p, b)
		b[0] = 'X' // the cache holds a copy
		got, ok := c.get(9, p)
		if !ok || len(got) != size || got[0] != byte('a'+i) || !bytes.Equal(got[1:], b[1:]) {
			t.Fatalf("size %d: got %d bytes, ok %v", size, len(got), ok)
		}
		if _, ok := c.get(9, pos); ok {
			t.Fatalf("size %d: a position never put for stream 9 is held", size)
		}
	}
}
