//go:build linux

package hugepage

import (
	"testing"
	"unsafe"
)

// advised fails the test unless p's mapping is advised.
func advised(t *testing.T, p unsafe.Pointer) bool {
	t.Helper()
	ok, err := Advised(p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
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
		if !advised(t, unsafe.Pointer(unsafe.SliceData(b))) {
			t.Errorf("Make(%d) at %#x: mapping not advised (no hg flag)", n, addr(b))
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
	if !advised(t, unsafe.Pointer(unsafe.SliceData(b))) {
		t.Error("advised buffer's mapping has no hg flag")
	}
	if n := Advise(make([]byte, Size/2-1)); n != 0 {
		t.Errorf("Advise of a buffer under half a huge page: %d bytes advised, want 0", n)
	}
}

// TestDisabled: GODEBUG=disablethp=1, the runtime's switch for huge pages
// on its heap, turns the advice off, parsed as the runtime parses it.
func TestDisabled(t *testing.T) {
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
		if got := disabled(godebug); got != want {
			t.Errorf("disabled(%q) = %v, want %v", godebug, got, want)
		}
	}
	defer func(old bool) { off = old }(off)
	off = true
	if got := Advise(make([]byte, 4<<20)); got != 0 {
		t.Errorf("with disablethp=1, %d bytes advised", got)
	}
	if b := Make(4 << 20); uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Size == 0 && cap(b) != 4<<20 {
		t.Errorf("with disablethp=1, Make over-allocated for alignment (cap %d)", cap(b))
	}
}
