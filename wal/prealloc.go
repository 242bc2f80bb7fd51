package wal

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// fillChunk is the zero-fill step. Each step may delay a commit that starts
// while it is in flight, so it is kept small.
const fillChunk = 256 << 10

// prepared is the next segment file, zero-filled in the background.
type prepared struct {
	seg      uint64
	stop     chan struct{} // closed by finish: rotation needs the file now
	stopOnce sync.Once
	done     chan struct{}

	// Set before done is closed.
	f    File
	size int64 // bytes filled and fsync'ed: the file's size
	err  error
}

// idleGate tells the filler when the writer has nothing to do. Zero-filling
// writes every segment a second time; that buys lower fdatasync latency
// when the log is latency-bound, but while commits run back to back the
// zeros compete with them for the disk (measured: a third of 256-appender
// throughput) and group commit has already amortised the metadata update
// that preallocation saves. So the filler works only while the writer is
// idle, and under sustained load segments simply grow as records are
// written.
type idleGate struct {
	idle atomic.Bool
	wake chan struct{} // capacity 1: "idle may have become true"
}

func newIdleGate() *idleGate { return &idleGate{wake: make(chan struct{}, 1)} }

func (g *idleGate) set(idle bool) {
	g.idle.Store(idle)
	if idle {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// prepare starts preparing segment seg's file. With a nil gate the file is
// filled without waiting for idle time.
func (w *WAL) prepare(seg uint64, gate *idleGate) {
	p := &prepared{seg: seg, stop: make(chan struct{}), done: make(chan struct{})}
	w.next = p
	go func() {
		defer close(p.done)
		p.f, p.size, p.err = p.fill(w.fs, w.tmpPath(seg), w.segSize, gate)
	}()
}

// finish stops the fill and returns the file. A file that was not filled to
// the end is still usable: records written past its end extend it, and only
// those fdatasyncs pay for the metadata update. Waiting for the rest instead
// would stall every appender behind the rotation.
func (p *prepared) finish() (File, int64, error) {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
	return p.f, p.size, p.err
}

// fill creates path and writes zeros to it until size bytes are written or
// finish is called, then fsyncs it.
func (p *prepared) fill(fsys FS, path string, size int64, gate *idleGate) (File, int64, error) {
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("wal: create %s: %w", path, err)
	}
	fail := func(op string, err error) (File, int64, error) {
		f.Close()
		fsys.Remove(path) // best effort: Open deletes leftover .tmp files anyway
		return nil, 0, fmt.Errorf("wal: preallocate %s: %s: %w", path, op, err)
	}
	wb, _ := f.(writeBacker)
	var filled int64
fill:
	for filled < size {
		select {
		case <-p.stop:
			break fill
		default:
		}
		if gate != nil && !gate.idle.Load() {
			select {
			case <-gate.wake:
			case <-p.stop:
				break fill
			}
			continue
		}
		n := min(fillChunk, size-filled)
		if _, err := f.WriteAt(zeros[:n], filled); err != nil {
			return fail("write", err)
		}
		// Write the chunk back now and wait for it, so the zeros never
		// pile up in the page cache to reach the disk in one burst (at
		// the final fsync, or whenever the kernel decides) while
		// commits are running.
		if wb != nil {
			if err := wb.WriteBack(filled, n); err != nil {
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
func (p *prepared) discard(fsys FS, path string) error {
	f, _, err := p.finish()
	if err != nil {
		return nil // the fill failed and cleaned up after itself; nobody needed the file
	}
	f.Close()
	if err := fsys.Remove(path); err != nil {
		return fmt.Errorf("wal: remove unused preallocated segment: %w", err)
	}
	return nil
}
