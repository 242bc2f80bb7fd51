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
