package picomq

import (
	"sync"

	"github.com/PicoMQ/picomq/sdk/hugepage"
)

// pageChunk is the size of the chunks pageSlab carves page buffers from:
// two huge pages.
const pageChunk = 2 * hugepage.Size

// pageSlab hands out the buffers of page bodies of half a huge page up
// to a huge page (a catch-up of a 1 MiB stream is one such page, and a
// hundred readers of such streams read a hundred of them), consecutively
// out of chunks from hugepage.Make. On its own such a buffer is a plain
// make (hugepage.Make would waste up to half of a huge page on it), and
// its fresh memory faults in 4 KiB at a time: about 100 ms of CPU per
// 100 such pages here against 35-60 ms carved from advised chunks
// (docs/benchmarks.md, "100 cold readers"). A buffer is as immutable as
// any page buffer (its records alias it); the chunk stays in memory as
// long as any of its two or three buffers does.
var pageSlab struct {
	mu   sync.Mutex
	free []byte // the unused rest of the current chunk
}

// pageBuffer returns a buffer of n bytes (capacity n) for a page body:
// carved from pageSlab for n in [hugepage.Size/2, hugepage.Size),
// otherwise hugepage.Make's.
func pageBuffer(n int) []byte {
	if n < hugepage.Size/2 || n >= hugepage.Size {
		return hugepage.Make(n)
	}
	pageSlab.mu.Lock()
	defer pageSlab.mu.Unlock()
	if len(pageSlab.free) < n {
		pageSlab.free = hugepage.Make(pageChunk)
	}
	b := pageSlab.free[:n:n]
	pageSlab.free = pageSlab.free[n:]
	return b
}
