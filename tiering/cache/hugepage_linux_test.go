package cache

import (
	"os"
	"testing"
	"unsafe"

	"github.com/PicoMQ/picomq/sdk/hugepage"
)

// advised fails the test unless p's mapping is advised for huge pages
// (the "hg" VmFlag).
func advised(t *testing.T, p unsafe.Pointer) bool {
	t.Helper()
	ok, err := hugepage.Advised(p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestRunBufferIsAdvisedForHugePages: the buffer a multi-block GET is read
// into is advised for transparent huge pages (VmFlags "hg" on its mapping)
// before the body lands, so fresh memory faults once per 2 MiB, not per
// 4 KiB page (sdk/hugepage). Without the advice the Go heap's mappings
// carry no "hg" (the runtime does not ask for huge pages).
func TestRunBufferIsAdvisedForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("kernel without transparent huge pages")
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			const block = 128 << 10
			c, _, data := setup(t, newStore(t), 64*block, Options{BlockSize: block, ReadAhead: -1})
			p, err := c.Slice(t.Context(), "obj", 0, 32*block, 32*block)
			if err != nil {
				t.Fatal(err)
			}
			if string(p) != string(data[:32*block]) {
				t.Fatal("slice differs from the object")
			}
			if !advised(t, unsafe.Pointer(&p[len(p)/2])) {
				t.Error("the run's memory is not advised for huge pages")
			}
			if got := c.Stats().HugePageAdvised; got < 32*block {
				t.Errorf("HugePageAdvised %d, want >= %d", got, 32*block)
			}
		})
	}
}

// TestStraddleCopyIsAdvisedForHugePages: a Slice that straddles two runs
// copies its bytes into fresh memory, advised like a run's (a 1 MiB batch
// split between two GETs is the common case: on fresh pages that copy cost
// more than the bytes' GET).
func TestStraddleCopyIsAdvisedForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("kernel without transparent huge pages")
	}
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			const block, runBytes = 128 << 10, 1 << 20
			c, _, data := setup(t, newStore(t), 4*runBytes, Options{BlockSize: block, FetchBlocks: runBytes / block, ReadAhead: -1})
			// Two neighbouring runs in memory, each one GET.
			for off := int64(0); off < 2*runBytes; off += runBytes {
				if _, err := c.ReadAt(t.Context(), "obj", make([]byte, runBytes), off); err != nil {
					t.Fatal(err)
				}
			}
			before := c.Stats()
			off := int64(runBytes / 2)
			p, err := c.Slice(t.Context(), "obj", off, runBytes, runBytes)
			if err != nil {
				t.Fatal(err)
			}
			if string(p) != string(data[off:off+runBytes]) {
				t.Fatal("slice differs from the object")
			}
			after := c.Stats()
			if after.Requests != before.Requests {
				t.Fatalf("the straddling slice sent %d GETs; the test wants it copied from memory", after.Requests-before.Requests)
			}
			if got := after.HugePageAdvised - before.HugePageAdvised; got < runBytes {
				t.Errorf("the straddle copy advised %d bytes, want >= %d", got, runBytes)
			}
			if !advised(t, unsafe.Pointer(&p[len(p)/2])) {
				t.Error("the copy's memory is not advised for huge pages")
			}
		})
	}
}
