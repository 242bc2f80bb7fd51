//go:build linux

package picomq

import (
	"bytes"
	"io"
	"net/http"
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

// TestReadAllCarvesPagesOfOneToTwoMiB: page bodies of half a huge page up
// to a huge page (a catch-up of a 1 MiB stream of 1 KiB records is one
// page of 1,110,000-odd bytes) are read into consecutive buffers of one
// advised chunk, not plain makes whose fresh memory faults 4 KiB at a
// time (docs/benchmarks.md, "100 cold readers"). A plain make of these
// sizes is rounded to 8 KiB pages, so two are never back to back.
func TestReadAllCarvesPagesOfOneToTwoMiB(t *testing.T) {
	for _, n := range []int{1110000, hugepage.Size / 2, hugepage.Size - 1} {
		pageSlab.mu.Lock()
		pageSlab.free = nil // a fresh chunk for the first of the two
		pageSlab.mu.Unlock()
		var bufs [][]byte
		for range 2 {
			body := bytes.Repeat([]byte{0x5a}, n)
			b, err := readAll(&http.Response{ContentLength: int64(n), Body: io.NopCloser(bytes.NewReader(body))})
			if err != nil || !bytes.Equal(b, body) || cap(b) != n {
				t.Fatalf("%d bytes: read %d (cap %d), equal %v, err %v", n, len(b), cap(b), bytes.Equal(b, body), err)
			}
			bufs = append(bufs, b)
		}
		a, b := uintptr(unsafe.Pointer(unsafe.SliceData(bufs[0]))), uintptr(unsafe.Pointer(unsafe.SliceData(bufs[1])))
		if 2*n <= pageChunk && b != a+uintptr(n) {
			t.Errorf("%d bytes: buffers at %#x and %#x, not one after the other in a chunk", n, a, b)
		}
		for i, buf := range bufs {
			if adv, err := hugepage.Advised(unsafe.Pointer(unsafe.SliceData(buf))); err != nil || !adv {
				t.Errorf("%d bytes, buffer %d: advised for huge pages %v (%v)", n, i, adv, err)
			}
		}
	}
}
