package cache

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of an x86-64 / arm64 (4 KiB base pages) transparent
// huge page.
const hugePage = 2 << 20

// thpOff is set when GODEBUG has disablethp=1, the Go runtime's own switch
// that keeps transparent huge pages off the heap: the cache honours it
// rather than advise the opposite.
var thpOff = thpDisabled(os.Getenv("GODEBUG"))

// thpDisabled reports whether a GODEBUG value turns disablethp on (the
// last setting of it wins and nothing is trimmed, as in the runtime).
func thpDisabled(godebug string) bool {
	off := false
	for _, kv := range strings.Split(godebug, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "disablethp" {
			off = v == "1"
		}
	}
	return off
}

// adviseHugePages asks the kernel to back buf with transparent huge pages
// (madvise MADV_HUGEPAGE) before anything is written to it, and reports
// the bytes advised (0 when buf is under 1 MiB or the kernel refused).
// It is used for a run's buffer and for the copy of a range that
// straddles two runs (Slice), both fresh memory written once.
//
// Why: a run's buffer is fresh memory, written first by the socket read of
// its GET body. On a node whose heap has not grown to its working size yet
// (a cold start, the first fill of the cache) or whose free memory the Go
// scavenger has returned to the OS, every 4 KiB page of it faults on that
// first write, inside the read syscall; on a VM that costs several times
// the copy itself (BenchmarkReadRange in tiering/objstore/s3: about 225 ms
// of CPU per 64 MiB into such memory, against 55 ms into a reused buffer
// and 65 ms into memory advised like this). One fault per 2 MiB instead of
// 512 removes most of it. With the system's THP setting "always" this is
// what happens anyway; with "never" the advice has no effect.
//
// The range advised is buf rounded out to whole huge pages: rounding in
// would leave up to a huge page at each end of a 4 MiB run to 4 KiB faults
// (half of the saving, measured). The rounded-out edges are other heap
// memory, usually the neighbouring run; the advice only lets the kernel
// back an untouched 2 MiB range by one page, it changes no contents.
func adviseHugePages(buf []byte) int64 {
	if len(buf) < hugePage/2 || thpOff {
		return 0 // a small run or copy: not worth a syscall
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(len(buf))
	lo &^= hugePage - 1
	hi = (hi + hugePage - 1) &^ (hugePage - 1)
	// unix.Madvise takes a []byte; building one over the rounded range
	// would make a slice of memory this code does not own, so the raw
	// syscall takes the addresses instead. The advice is a hint: an error
	// (an old kernel, THP compiled out, part of the rounded range not
	// mapped) is not one for the read, and the bytes are not counted.
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE); errno != 0 {
		return 0
	}
	return int64(hi - lo)
}
