package wal

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	segmentExt = ".wal"
	tmpExt     = ".tmp"
	lockName   = "LOCK"
	// digits keeps names the same length so lexical order is numeric order
	// for ls and for operators, not only for this package.
	digits = 20
)

func segmentName(seg uint64) string {
	return fmt.Sprintf("%0*d%s", digits, seg, segmentExt)
}

// parseSegmentName accepts exactly the names segmentName produces; anything
// else in the directory (LOCK, an operator's notes) is not ours to judge.
func parseSegmentName(name string) (uint64, bool) {
	num, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(num) != digits {
		return 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seg, err := strconv.ParseUint(num, 10, 64)
	return seg, err == nil
}

// listSegments returns the segment numbers in dir in ascending order and
// deletes leftover preallocation files: a .tmp file was never renamed into
// place, so it holds no records.
func listSegments(fsys FS, dir string) ([]uint64, error) {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var segs []uint64
	for _, e := range ents {
		name := e.Name()
		if base, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(base); ok {
				if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
					return nil, fmt.Errorf("wal: remove stale %s: %w", name, err)
				}
			}
			continue
		}
		if seg, ok := parseSegmentName(name); ok && e.Type().IsRegular() {
			segs = append(segs, seg)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// zeros is the source for zero writes; it lives in BSS, so it costs no heap
// and, never being written, no memory.
var zeros [readChunk]byte

func zeroRange(f io.WriterAt, off, end int64) error {
	for off < end {
		n := min(int64(len(zeros)), end-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// syncDir makes creations, renames and removals in dir durable; without it a
// crash can forget a segment whose records were already acknowledged.
func syncDir(fsys FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("wal: fsync directory %s: %w", dir, err)
	}
	return nil
}

// lockDir takes the exclusive lock on dir/LOCK. Two processes appending to
// one log would interleave records at the same offsets.
func lockDir(fsys FS, dir string) (io.Closer, error) {
	path := filepath.Join(dir, lockName)
	l, err := fsys.Lock(path)
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return nil, err
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	return l, nil
}

// fdatasync is the log's default sync: the file's own Sync, which for OSFS
// is fdatasync(2). Tests replace it to hold or fail individual calls.
func fdatasync(f File) error { return f.Sync() }
