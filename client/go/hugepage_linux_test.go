//go:build linux

package picomq

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestReadAllHugePageBuffer: a page body of a huge page or more is read
// into a buffer that starts on a huge page, and where transparent huge
// pages can be had on advice (THP "madvise" or "always"), the kernel
// backs it with them: the fresh memory of a catch-up page is faulted in
// 2 MiB at a time, not 4 KiB (docs/benchmarks.md, "Catch-up: fresh page
// memory in huge pages"). Without makePageBuffer the body is a plain
// make, 2 MiB-aligned only by chance, and in small pages.
func TestReadAllHugePageBuffer(t *testing.T) {
	for _, n := range []int{hugePage, 4135976, 3 * hugePage / 2, 5 << 20} {
		body := bytes.Repeat([]byte{0xa5}, n)
		b, err := readAll(&http.Response{ContentLength: int64(n), Body: io.NopCloser(bytes.NewReader(body))})
		if err != nil || !bytes.Equal(b, body) || cap(b) != n {
			t.Fatalf("%d bytes: read %d (cap %d), equal %v, err %v", n, len(b), cap(b), bytes.Equal(b, body), err)
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p%hugePage != 0 {
			t.Errorf("%d bytes: buffer at %#x, not on a huge page", n, p)
		}
		if !thpOnAdvice(t) {
			continue
		}
		if huge := anonHugeKB(t, p); huge < hugePage>>10 {
			t.Errorf("%d bytes at %#x: %d KiB of its mapping in huge pages, want at least %d", n, p, huge, hugePage>>10)
		}
	}
	// Smaller bodies are a plain make of their size.
	if b := makePageBuffer(hugePage - 1); len(b) != hugePage-1 || cap(b) != hugePage-1 {
		t.Errorf("below a huge page: len %d cap %d", len(b), cap(b))
	}
}

// thpOnAdvice reports whether the kernel gives transparent huge pages to
// memory advised MADV_HUGEPAGE.
func thpOnAdvice(t *testing.T) bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Logf("no THP setting: %v", err)
		return false
	}
	return !strings.Contains(string(b), "[never]")
}

// anonHugeKB returns the AnonHugePages of the mapping of this process
// that holds address p, from /proc/self/smaps.
func anonHugeKB(t *testing.T, p uintptr) int {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// A mapping's first line: "start-end perms offset dev inode path".
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(p) >= a && uint64(p) < z
				continue
			}
		}
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			kb, _ := strconv.Atoi(fields[1])
			return kb
		}
	}
	t.Fatalf("no mapping holds %#x", p)
	return 0
}
