//go:build linux

package picomq

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"testing"
	"unsafe"

	"github.com/PicoMQ/picomq/sdk/hugepage"
)

// TestReadAllHugePageBuffer: a page body of most of a huge page or more
// is read into a buffer from hugepage.Make, which starts on a huge page
// (sdk/hugepage tests that its memory is advised), so a catch-up's fresh
// page memory faults in 2 MiB at a time where the kernel allows
// (docs/benchmarks.md, "Catch-up: fresh page memory in huge pages"). A
// plain make is 2 MiB-aligned only by chance, not for all of these.
func TestReadAllHugePageBuffer(t *testing.T) {
	// 2067988 and 4135976: the last and the other pages of a catch-up
	// of the benchmark's 1 KiB records.
	for _, n := range []int{hugepage.Size, 2067988, 4135976, 3 * hugepage.Size / 2, 5 << 20} {
		body := bytes.Repeat([]byte{0xa5}, n)
		b, err := readAll(&http.Response{ContentLength: int64(n), Body: io.NopCloser(bytes.NewReader(body))})
		if err != nil || !bytes.Equal(b, body) || cap(b) != n {
			t.Fatalf("%d bytes: read %d (cap %d), equal %v, err %v", n, len(b), cap(b), bytes.Equal(b, body), err)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%hugepage.Size != 0 {
			t.Errorf("%d bytes: buffer at %#x, not on a huge page", n, p)
		}
	}
}

// TestPageBuffersSmallPage: a reused page buffer for a page under a huge
// page (the 1 MiB streams of the many-readers row) is a plain allocation
// of the page rounded up to an eighth of a huge page, not a huge-page
// buffer, which cost 4 MiB of memory the heap clears (2 MiB and
// hugepage.Make's alignment slack) for a 1 MiB page. Larger pages keep
// their huge pages.
func TestPageBuffersSmallPage(t *testing.T) {
	var p pageBuffers
	const n = 1_060_000 // a 1 MiB stream's page of 1 KiB records
	var b []byte
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b = p.get(n)
	runtime.ReadMemStats(&m1)
	if len(b) != n || cap(b) < n || cap(b) > n+hugepage.Size/8 {
		t.Fatalf("get(%d): len %d cap %d, want cap in [%d, %d]", n, len(b), cap(b), n, n+hugepage.Size/8)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > n+hugepage.Size/8 {
		t.Errorf("get(%d) allocated %d bytes, want at most %d", n, got, n+hugepage.Size/8)
	}
	p.put(b)
	if b2 := p.get(n + 1000); &b2[0] != &b[0] {
		t.Errorf("a slightly larger page did not reuse the free buffer")
	}
	big := p.get(hugepage.Size + 1)
	if ptr := uintptr(unsafe.Pointer(unsafe.SliceData(big))); ptr%hugepage.Size != 0 || cap(big) != 2*hugepage.Size {
		t.Errorf("get(%d): buffer at %#x cap %d, want a huge-page buffer of %d", hugepage.Size+1, ptr, cap(big), 2*hugepage.Size)
	}
}
