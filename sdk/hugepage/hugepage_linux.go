//go:build linux

package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// madvHugePage is MADV_HUGEPAGE, the same on every Linux architecture
// (not in package syscall).
const madvHugePage = 14

// Advise advises buf's memory, rounded out to whole huge pages, for
// transparent huge pages before anything is written to it, and returns
// the bytes advised (0 for a buffer under half a huge page, when
// disabled, or when the kernel refused).
//
// Rounding out, not in: rounding in would leave up to a huge page at each
// end of a 4 MiB buffer to 4 KiB faults (half of the saving, measured).
// The rounded-out edges are neighbouring heap memory; the advice only lets
// the kernel back an untouched 2 MiB range by one page.
func Advise(buf []byte) int64 {
	if len(buf) < Size/2 || off {
		return 0
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(len(buf))
	lo &^= Size - 1
	hi = (hi + Size - 1) &^ (Size - 1)
	// The raw syscall takes addresses: a []byte over the rounded range
	// would be a slice of memory this code does not own.
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, madvHugePage); errno != 0 {
		return 0
	}
	return int64(hi - lo)
}

// Make returns a buffer of n bytes that starts on a huge page and whose
// whole huge pages are advised before the first write, for a body that
// fills most of its last huge page (a buffer that would waste more than
// a sixteenth of n rounded up has its tail in small pages; one under
// 1.88 MiB is a plain make). The allocation is a huge page larger than
// needed so its bytes can start on one; the slack is never written, so
// where the memory is fresh it is never backed.
func Make(n int) []byte {
	span := (n + Size - 1) &^ (Size - 1) // n rounded up to huge pages
	if span-n > n/16 {
		span = n &^ (Size - 1) // rounded down: the tail stays small pages
	}
	if span == 0 || off {
		return make([]byte, n)
	}
	buf := make([]byte, max(span, n)+Size)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	o := int(((p + Size - 1) &^ (Size - 1)) - p)
	_ = syscall.Madvise(buf[o:o+span], madvHugePage)
	return buf[o : o+n : o+n]
}

// Advised reports whether the mapping of this process that holds p is
// advised for huge pages (the "hg" VmFlag in /proc/self/smaps): for tests
// and diagnostics; it reads the whole smaps file.
func Advised(p unsafe.Pointer) (bool, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return false, err
	}
	defer f.Close()
	addr := uint64(uintptr(p))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		// A mapping's first line: "start-end perms offset dev inode path".
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = addr >= a && addr < z
				continue
			}
		}
		if in && fields[0] == "VmFlags:" {
			return slices.Contains(fields[1:], "hg"), nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("hugepage: no mapping holds %#x", addr)
}
