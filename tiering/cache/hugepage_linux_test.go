package cache

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// vmaFlags returns the VmFlags line of the mapping of this process that
// holds addr, from /proc/self/smaps.
func vmaFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uintptr(l) <= addr && addr < uintptr(h)
				continue
			}
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

// TestRunBufferIsAdvisedForHugePages: the buffer a multi-block GET is read
// into is advised for transparent huge pages (VmFlags "hg" on its mapping)
// before the body lands, so fresh memory faults once per 2 MiB, not per
// 4 KiB page (adviseHugePages). Without the advice the Go heap's mappings
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
			mid := uintptr(unsafe.Pointer(&p[len(p)/2]))
			if flags := vmaFlags(t, mid); !strings.Contains(" "+flags+" ", " hg ") {
				t.Errorf("the run's memory is not advised for huge pages: %s", flags)
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
			mid := uintptr(unsafe.Pointer(&p[len(p)/2]))
			if flags := vmaFlags(t, mid); !strings.Contains(" "+flags+" ", " hg ") {
				t.Errorf("the copy's memory is not advised for huge pages: %s", flags)
			}
		})
	}
}

// TestDisableTHPIsHonoured: GODEBUG=disablethp=1, the runtime's switch for
// huge pages on the heap, turns the cache's advice off too.
func TestDisableTHPIsHonoured(t *testing.T) {
	for godebug, want := range map[string]bool{
		"":                          false,
		"disablethp=1":              true,
		"gctrace=1,disablethp=1":    true,
		"gctrace=1, disablethp=1":   false, // the runtime does not trim either
		"disablethp=0":              false,
		"disablethp=1,disablethp=0": false,
		"madvdontneed=1":            false,
		"xdisablethp=1":             false,
	} {
		if got := thpDisabled(godebug); got != want {
			t.Errorf("thpDisabled(%q) = %v, want %v", godebug, got, want)
		}
	}
	defer func(old bool) { thpOff = old }(thpOff)
	thpOff = true
	if got := adviseHugePages(make([]byte, 4<<20)); got != 0 {
		t.Errorf("with disablethp=1, %d bytes advised", got)
	}
}
