package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// buildLog writes entries with the given payload sizes into a fresh log and
// closes it.
func buildLog(t *testing.T, segSize int64, sizes []int) (string, []entry) {
	t.Helper()
	dir := t.TempDir()
	w, _ := openWAL(t, dir, segSize)
	// awaitPrepared: every segment fully preallocated, so damage to its
	// padding is at a fixed place.
	all := appendPayloads(t, w, sizes, awaitPrepared)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, all
}

func recordStart(p Pos) int64 { return p.Offset - headerSize }
func recordEnd(p Pos) int64   { return p.Offset + int64(p.Len) }

// TestTornTailAtEveryByte cuts the last record of the last segment at every
// byte boundary, both by truncating the file (an unpreallocated or shrunk
// file) and by zeroing the rest (a preallocated file whose last write did not
// fully land), and checks that recovery keeps exactly the earlier records,
// reports what it dropped, and leaves a log that appends cleanly.
func TestTornTailAtEveryByte(t *testing.T) {
	const segSize = 4096
	// Five 1000-byte entries: four in segment 1, one in segment 2, then the
	// 120-byte victim.
	sizes := []int{1000, 1000, 1000, 1000, 1000, 120}
	src, all := buildLog(t, segSize, sizes)
	last := all[len(all)-1].pos
	if last.Segment != 2 {
		t.Fatalf("victim in segment %d, want 2", last.Segment)
	}
	orig, err := os.ReadFile(segPath(src, 2))
	if err != nil {
		t.Fatal(err)
	}
	start, end := recordStart(last), recordEnd(last)

	for _, mode := range []string{"truncate", "zero"} {
		for cut := start; cut <= end; cut++ {
			dir := copyDir(t, src)
			var img []byte
			if mode == "truncate" {
				img = orig[:cut]
			} else {
				img = bytes.Clone(orig)
				clear(img[cut:end])
			}
			if err := os.WriteFile(segPath(dir, 2), img, 0o644); err != nil {
				t.Fatal(err)
			}
			w, rep := openWAL(t, dir, segSize)
			kept := all[:len(all)-1]
			wantTorn := int64(lastNonZero(orig[start:cut]))
			if cut == end {
				kept, wantTorn = all, 0 // the record is whole
			}
			want := RecoveryReport{Segments: 2, Entries: len(kept), TornBytes: wantTorn}
			if wantTorn > 0 {
				want.TornSegment = 2
			}
			if rep != want {
				t.Fatalf("%s at %d: report %+v, want %+v", mode, cut, rep, want)
			}
			sameEntries(t, replayAll(t, w), kept)
			// The next entry goes where the dropped one started, and a
			// reopen sees no trace of the torn bytes.
			next := entry{data: []byte("after the tear")}
			if next.pos, err = w.Append(context.Background(), next.data); err != nil {
				t.Fatal(err)
			}
			if cut < end && (next.pos.Segment != 2 || recordStart(next.pos) != start) {
				t.Fatalf("%s at %d: next entry at %+v, want segment 2 offset %d", mode, cut, next.pos, start)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w2, rep := openWAL(t, dir, segSize)
			if rep.TornBytes != 0 || rep.Entries != len(kept)+1 {
				t.Fatalf("%s at %d: second recovery %+v, want %d entries and nothing torn", mode, cut, rep, len(kept)+1)
			}
			sameEntries(t, replayAll(t, w2), append(kept[:len(kept):len(kept)], next))
			w2.Close()
		}
	}
}

func TestTornGarbageIsZeroedAndLogged(t *testing.T) {
	const segSize = 64 << 10
	dir, all := buildLog(t, segSize, []int{100, 200, 300})
	end := recordEnd(all[2].pos)
	garbage := make([]byte, 5000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32()) | 1
	}
	f, err := os.OpenFile(segPath(dir, 1), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(garbage, end); err != nil {
		t.Fatal(err)
	}
	f.Close()

	var logs bytes.Buffer
	w, rep, err := Open(Options{Dir: dir, SegmentSize: segSize, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if want := (RecoveryReport{Segments: 1, Entries: 3, TornSegment: 1, TornBytes: int64(len(garbage))}); rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	if !strings.Contains(logs.String(), "torn") || !strings.Contains(logs.String(), "bytes=5000") {
		t.Fatalf("torn tail not logged; log output:\n%s", logs.String())
	}
	img, err := os.ReadFile(segPath(dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	if !allZero(img[end:]) {
		t.Fatal("torn bytes are still in the file after recovery")
	}
	sameEntries(t, replayAll(t, w), all)
}

// TestCorruption damages a reference log in ways a crash cannot, and checks
// that Open refuses it with ErrCorrupt naming segment and offset, and does
// not modify the files.
func TestCorruption(t *testing.T) {
	const segSize = 4096
	// Eleven 1000-byte entries: four each in segments 1 and 2, three in 3.
	sizes := make([]int, 11)
	for i := range sizes {
		sizes[i] = 1000
	}
	src, all := buildLog(t, segSize, sizes)
	if all[8].pos.Segment != 3 || all[10].pos.Segment != 3 || all[3].pos.Segment != 1 {
		t.Fatalf("unexpected layout %+v", all)
	}
	flip := func(seg uint64, off int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			img, err := os.ReadFile(segPath(dir, seg))
			if err != nil {
				t.Fatal(err)
			}
			img[off] ^= 0x40
			if err := os.WriteFile(segPath(dir, seg), img, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mid, firstSegLast := all[9].pos, all[3].pos
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string // substrings of the error
	}{
		{"payload of a middle record in the last segment", flip(3, mid.Offset+10),
			[]string{"segment 3", fmt.Sprintf("offset %d", recordStart(mid)), "payload checksum"}},
		{"length of a middle record in the last segment", flip(3, recordStart(mid)+2),
			[]string{"segment 3", fmt.Sprintf("offset %d", recordStart(mid))}},
		{"hole before a valid record in the last segment", func(t *testing.T, dir string) {
			img, err := os.ReadFile(segPath(dir, 3))
			if err != nil {
				t.Fatal(err)
			}
			clear(img[recordStart(mid):mid.Offset])
			if err := os.WriteFile(segPath(dir, 3), img, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"segment 3", fmt.Sprintf("offset %d", recordStart(mid)), "valid record follows"}},
		{"last record of an earlier segment", flip(1, firstSegLast.Offset+999),
			[]string{"segment 1", fmt.Sprintf("offset %d", recordStart(firstSegLast)), "only the last segment"}},
		{"first record of the first segment", flip(1, 0),
			[]string{"segment 1", "offset 0"}},
		// The rotation may have taken segment 2 before its zero-fill
		// finished, so the file can end right after its last record:
		// pad it to the full segment size first, then damage the
		// padding's last byte, whatever preallocation managed.
		{"padding of an earlier segment", func(t *testing.T, dir string) {
			img, err := os.ReadFile(segPath(dir, 2))
			if err != nil {
				t.Fatal(err)
			}
			if len(img) < segSize {
				img = append(img, make([]byte, segSize-len(img))...)
			}
			img[segSize-1] ^= 0x40
			if err := os.WriteFile(segPath(dir, 2), img, 0o644); err != nil {
				t.Fatal(err)
			}
		},
			[]string{"segment 2", fmt.Sprintf("offset %d", recordEnd(all[7].pos))}},
		{"earlier segment cut short", func(t *testing.T, dir string) {
			if err := os.Truncate(segPath(dir, 1), firstSegLast.Offset+500); err != nil {
				t.Fatal(err)
			}
		}, []string{"segment 1", fmt.Sprintf("offset %d", recordStart(firstSegLast)), "past end of file"}},
		{"missing middle segment", func(t *testing.T, dir string) {
			if err := os.Remove(segPath(dir, 2)); err != nil {
				t.Fatal(err)
			}
		}, []string{"segment 2 missing"}},
		{"segments swapped", func(t *testing.T, dir string) {
			if err := os.Rename(segPath(dir, 1), segPath(dir, 99)); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(segPath(dir, 2), segPath(dir, 1)); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(segPath(dir, 99), segPath(dir, 2)); err != nil {
				t.Fatal(err)
			}
		}, []string{"segment 1", "offset 0", "header checksum"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, src)
			tc.damage(t, dir)
			before := snapshot(t, dir)
			w, _, err := Open(Options{Dir: dir, SegmentSize: segSize, Logger: testLogger(t)})
			if err == nil {
				w.Close()
				t.Fatal("Open accepted a corrupt log")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if after := snapshot(t, dir); !maps.Equal(before, after) {
				t.Fatal("a refused Open modified the log")
			}
		})
	}
}

// snapshot maps each segment file name to its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if _, ok := parseSegmentName(e.Name()); !ok {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

// TestDamagedLastRecordIsTornNotCorrupt pins down the other side of the
// rule: damage in the final record of the last segment, with nothing valid
// after it, is indistinguishable from a torn write and is recovered as one.
func TestDamagedLastRecordIsTornNotCorrupt(t *testing.T) {
	dir, all := buildLog(t, 4096, []int{100, 100, 100})
	last := all[2].pos
	img, err := os.ReadFile(segPath(dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	img[last.Offset+50] ^= 0xff
	if err := os.WriteFile(segPath(dir, 1), img, 0o644); err != nil {
		t.Fatal(err)
	}
	w, rep := openWAL(t, dir, 4096)
	if rep.Entries != 2 || rep.TornSegment != 1 || rep.TornBytes != headerSize+100 {
		t.Fatalf("report %+v, want 2 entries and %d torn bytes in segment 1", rep, headerSize+100)
	}
	sameEntries(t, replayAll(t, w), all[:2])
}
