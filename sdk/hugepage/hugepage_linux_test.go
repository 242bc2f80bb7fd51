//go:build linux

package hugepage

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// vmFlags returns the VmFlags of the mapping of this process that holds
// address p, from /proc/self/smaps ("hg": advised MADV_HUGEPAGE).
func vmFlags(t *testing.T, p uintptr) []string {
	t.Helper()
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
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", p)
	return nil
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestMakeStartsOnAnAdvisedHugePage: Make's buffers of most of a huge
// page or more start on one and their mapping is advised; smaller ones
// are a plain make. Without the advice the Go heap's mappings carry no
// "hg" (the runtime does not ask for huge pages).
func TestMakeStartsOnAnAdvisedHugePage(t *testing.T) {
	if off {
		t.Skip("GODEBUG=disablethp=1 turns the advice off")
	}
	for _, n := range []int{Size, 2067988, 4135976, 3 * Size / 2, 5 << 20} {
		b := Make(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Make(%d): len %d cap %d", n, len(b), cap(b))
		}
		if addr(b)%Size != 0 {
			t.Errorf("Make(%d) at %#x: not on a huge page", n, addr(b))
		}
		if flags := vmFlags(t, addr(b)); !slices.Contains(flags, "hg") {
			t.Errorf("Make(%d) at %#x: mapping flags %v, want hg", n, addr(b), flags)
		}
	}
	if b := Make(Size * 15 / 16); len(b) != Size*15/16 || cap(b) != Size*15/16 {
		t.Errorf("Make(%d): len %d cap %d, want a plain make", Size*15/16, len(b), cap(b))
	}
}

// TestAdviseRoundsOut: Advise covers the buffer rounded out to whole huge
// pages and leaves small buffers alone.
func TestAdviseRoundsOut(t *testing.T) {
	if off {
		t.Skip("GODEBUG=disablethp=1 turns the advice off")
	}
	b := make([]byte, 3<<20)
	got := Advise(b[1:])
	lo := addr(b[1:]) &^ (Size - 1)
	hi := (addr(b) + uintptr(len(b)) + Size - 1) &^ (Size - 1)
	if got != int64(hi-lo) {
		t.Errorf("Advise of %d bytes: %d advised, want %d (rounded out)", len(b)-1, got, hi-lo)
	}
	if flags := vmFlags(t, addr(b)); !slices.Contains(flags, "hg") {
		t.Errorf("advised buffer's mapping flags %v, want hg", flags)
	}
	if n := Advise(make([]byte, Size/2-1)); n != 0 {
		t.Errorf("Advise of a buffer under half a huge page: %d bytes advised, want 0", n)
	}
}

func TestDisabled(t *testing.T) {
	for in, want := range map[string]bool{
		"": false, "disablethp=1": true, "disablethp=0": false,
		"x=1,disablethp=1": true, "disablethp=1,disablethp=0": false, " disablethp=1": false,
	} {
		if got := disabled(in); got != want {
			t.Errorf("disabled(%q) = %v, want %v", in, got, want)
		}
	}
}
