//go:build linux

package picomq

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestReadAllHugePageBuffer: a page body of most of a huge page or more
// is read into a buffer that starts on a huge page and whose memory is
// advised MADV_HUGEPAGE (the "hg" flag of its mapping in
// /proc/self/smaps), so that where the kernel gives transparent huge
// pages on advice, the fresh memory of a catch-up page is faulted in
// 2 MiB at a time, not 4 KiB (docs/benchmarks.md, "Catch-up: fresh page
// memory in huge pages"). Whether the kernel grants them depends on its
// THP setting and on the memory being new to the process (pages once
// faulted in stay small), so only the advice is asserted. Without
// makePageBuffer the body is a plain make, 2 MiB-aligned only by chance,
// and not advised.
func TestReadAllHugePageBuffer(t *testing.T) {
	// 2067988 and 4135976: the last and the other pages of a catch-up
	// of the benchmark's 1 KiB records.
	for _, n := range []int{hugePage, 2067988, 4135976, 3 * hugePage / 2, 5 << 20} {
		body := bytes.Repeat([]byte{0xa5}, n)
		b, err := readAll(&http.Response{ContentLength: int64(n), Body: io.NopCloser(bytes.NewReader(body))})
		if err != nil || !bytes.Equal(b, body) || cap(b) != n {
			t.Fatalf("%d bytes: read %d (cap %d), equal %v, err %v", n, len(b), cap(b), bytes.Equal(b, body), err)
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p%hugePage != 0 {
			t.Errorf("%d bytes: buffer at %#x, not on a huge page", n, p)
		}
		if flags := vmFlags(t, p); !slices.Contains(flags, "hg") {
			t.Errorf("%d bytes at %#x: mapping flags %v, want hg (MADV_HUGEPAGE)", n, p, flags)
		}
	}
	// Bodies that would not fill most of a huge page are a plain make.
	if b := makePageBuffer(hugePage * 15 / 16); len(b) != hugePage*15/16 || cap(b) != hugePage*15/16 {
		t.Errorf("%d bytes: len %d cap %d, want a plain make", hugePage*15/16, len(b), cap(b))
	}
}

// vmFlags returns the VmFlags of the mapping of this process that holds
// address p, from /proc/self/smaps.
func vmFlags(t *testing.T, p uintptr) []string {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
				in = uint64(p) >= a && uint64(p) < z
				continue
			}
		}
		if in && fields[0] == "VmFlags:" {
			return fields[1:]
		}
	}
	t.Fatalf("no mapping holds %#x", p)
	return nil
}
