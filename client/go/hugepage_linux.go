//go:build linux

package picomq

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Go
// supports on Linux (x86-64, arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// madvHugePage is MADV_HUGEPAGE (not in package syscall).
const madvHugePage = 14

// makePageBuffer returns a buffer of n bytes for a page body that the
// kernel backs with transparent huge pages where it can (madvise
// MADV_HUGEPAGE on whole, 2 MiB-aligned huge pages, before the first
// write). A catch-up's page buffers are fresh memory every time (its
// records alias them, so they cannot be reused), and the kernel faulting
// them in 4 KiB at a time was most of the client's CPU of a warm
// catch-up (docs/benchmarks.md, "Catch-up: fresh page memory in huge
// pages"): one fault per 2 MiB instead of 512. The buffer is allocated a huge page larger so
// that its bytes start on one; the huge pages that hold them are advised
// (the last one only when the bytes fill most of it: n rounded up wastes
// at most a sixteenth of n); the rest of the allocation is not written
// by the read, so where the memory is fresh it is never backed. A buffer
// that would not fill one huge page so (below 1.88 MiB) is a plain make;
// where THP is off or the call fails, the buffer is in small pages.
func makePageBuffer(n int) []byte {
	span := (n + hugePage - 1) &^ (hugePage - 1) // n rounded up to huge pages
	if span-n > n/16 {
		span = n &^ (hugePage - 1) // rounded down: the tail stays small pages
	}
	if span == 0 {
		return make([]byte, n)
	}
	buf := make([]byte, max(span, n)+hugePage)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	off := int(((p + hugePage - 1) &^ (hugePage - 1)) - p)
	_ = syscall.Madvise(buf[off:off+span], madvHugePage)
	return buf[off : off+n : off+n]
}
