package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var segs []uint64
	for _, e := range ents {
		name := e.Name()
		if base, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(base); ok {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
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
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		return errors.Join(fmt.Errorf("wal: fsync directory %s: %w", dir, err), d.Close())
	}
	return d.Close()
}

// lockDir takes an exclusive flock on dir/LOCK. Two processes appending to
// one log would interleave records at the same offsets; the kernel drops the
// lock when the holder dies, so a crash never leaves the log locked.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("wal: flock %s: %w", path, err)
	}
	return f, nil
}

// fdatasync repeats only on EINTR, which reports that the call was
// interrupted before doing anything, not that write-back failed; any other
// error is final (see "Failure" in the package doc).
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
