package wal

import (
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// preallocPace is how many bytes of the next segment are zero-filled per
// byte appended to the active one: at 2 the fill is complete when the active
// segment is half full. Filling the whole segment at once instead measurably
// hurt the log: SegmentSize of zeros competing with the commits' fdatasyncs
// cut 256-appender throughput roughly in half and doubled p99 while it ran.
const preallocPace = 2

// prepared is the next segment file, being zero-filled in the background at
// a pace set by the writer so that its I/O is spread across commits.
type prepared struct {
	seg  uint64
	want atomic.Int64  // bytes the writer wants filled by now
	stop atomic.Bool   // rotation needs the file now: stop where the fill is
	kick chan struct{} // wakes the filler after want or stop changed
	done chan struct{}

	// Set before done is closed.
	f    *os.File
	size int64 // bytes filled and fsync'ed: the file's size
	err  error
}

// prepare starts preparing segment seg's file, filling want bytes right away.
func (w *WAL) prepare(seg uint64, want int64) {
	p := &prepared{seg: seg, kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.want.Store(want)
	w.next = p
	go func() {
		defer close(p.done)
		p.f, p.size, p.err = p.fill(w.tmpPath(seg), w.segSize)
	}()
}

// pace tells the filler how far the active segment has got.
func (p *prepared) pace(activeEnd int64) {
	p.want.Store(preallocPace * activeEnd)
	p.nudge()
}

func (p *prepared) nudge() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// finish stops the fill and returns the file. A file that was not filled to
// the end is still usable: records written past its end extend it, and only
// those fdatasyncs pay for the metadata update. Waiting for the rest instead
// would stall every appender behind the rotation.
func (p *prepared) finish() (*os.File, int64, error) {
	p.stop.Store(true)
	p.nudge()
	<-p.done
	return p.f, p.size, p.err
}

// fill creates path and writes zeros up to want (eventually size), then
// fsyncs it.
func (p *prepared) fill(path string, size int64) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("wal: create %s: %w", path, err)
	}
	fail := func(op string, err error) (*os.File, int64, error) {
		f.Close()
		os.Remove(path) // best effort: Open deletes leftover .tmp files anyway
		return nil, 0, fmt.Errorf("wal: preallocate %s: %s: %w", path, op, err)
	}
	fd := int(f.Fd())
	var filled int64
	for filled < size && !p.stop.Load() {
		if filled >= min(size, p.want.Load()) {
			<-p.kick
			continue
		}
		n := min(int64(len(zeros)), size-filled)
		if _, err := f.WriteAt(zeros[:n], filled); err != nil {
			return fail("write", err)
		}
		// Start writeback of this chunk and wait for the previous one,
		// so at most two chunks of zeros are dirty or in flight and the
		// final fsync has almost nothing left to do.
		if err := unix.SyncFileRange(fd, filled, n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			return fail("sync_file_range", err)
		}
		if filled > 0 {
			prev := min(filled, int64(len(zeros)))
			flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if err := unix.SyncFileRange(fd, filled-prev, prev, flags); err != nil {
				return fail("sync_file_range", err)
			}
		}
		filled += n
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	return f, filled, nil
}

// discard stops an unused preparation and deletes its file.
func (p *prepared) discard(path string) error {
	f, _, err := p.finish()
	if err != nil {
		return nil // the fill failed and cleaned up; nobody needed the file
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("wal: remove unused preallocated segment: %w", err)
	}
	return nil
}
