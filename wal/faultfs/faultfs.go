// Package faultfs is a wal.FS over the real filesystem for tests: it can
// fail any call (EIO, ENOSPC, or any error a test chooses) and simulate a
// power cut, which drops every byte that no completed Sync covers and every
// rename or creation that no completed SyncDir covers. Pebble's vfs
// (errorfs, the strict in-memory FS) is the model.
//
// It tracks, for every file written through it, an undo record per write
// (the bytes the write replaced and the size before it). A successful Sync
// forgets a file's undo records; Crash applies the remaining ones in reverse,
// so the files on disk become exactly what a disk that honours fdatasync
// would hold after losing power. Crash can also keep a prefix of the
// unsynced writes, the last one cut short, to produce the torn tail a real
// power cut leaves behind.
//
// Removals are not undone (a crash may or may not bring a removed file
// back; the WAL only removes segments whose data is already elsewhere).
package faultfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/PicoMQ/picomq/wal"
)

// Op names a kind of call, for fault hooks.
type Op int

const (
	OpOpen Op = iota
	OpRead
	OpWrite
	OpSync
	OpSyncDir
	OpRename
	OpRemove
	OpList
	OpMkdir
	OpLock
)

func (o Op) String() string {
	return [...]string{"open", "read", "write", "sync", "syncdir", "rename", "remove", "list", "mkdir", "lock"}[o]
}

// ErrCrashed is returned by every call after Crash, except Close.
var ErrCrashed = fmt.Errorf("faultfs: power cut: %w", syscall.EIO)

// Hook decides the outcome of a call before it reaches the disk: a non-nil
// error fails the call with it. It may block (to hold the caller at a chosen
// point). It runs without the FS's lock held.
type Hook func(op Op, path string) error

// FS is a fault-injecting wal.FS. The zero value is not usable; call New.
type FS struct {
	real wal.OSFS

	hookMu sync.Mutex
	hook   Hook

	mu      sync.Mutex // serialises every call that changes the disk with Crash
	crashed bool
	files   map[*file]struct{} // files open or holding unsynced writes
	dirOps  []dirOp            // renames and creations no SyncDir covered yet
	syncs   int
}

// New returns an FS with no faults.
func New() *FS { return &FS{files: map[*file]struct{}{}} }

// SetHook installs h (nil removes it).
func (fs *FS) SetHook(h Hook) {
	fs.hookMu.Lock()
	fs.hook = h
	fs.hookMu.Unlock()
}

// Fail makes every later call of kind op fail with err (nil clears it).
func (fs *FS) Fail(op Op, err error) {
	if err == nil {
		fs.SetHook(nil)
		return
	}
	fs.SetHook(func(o Op, _ string) error {
		if o == op {
			return err
		}
		return nil
	})
}

// HoldSegmentSyncs makes every Sync of a WAL segment file (*.wal) wait
// until release is closed and then return err (nil: the Sync goes ahead).
// held is closed when the first such Sync starts waiting: the write is
// on disk, not yet synced.
func (fs *FS) HoldSegmentSyncs(err error) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetHook(func(op Op, path string) error {
		if op == OpSync && strings.HasSuffix(path, ".wal") {
			once.Do(func() { close(held) })
			<-release
			return err
		}
		return nil
	})
	return held, release
}

// Syncs is the number of successful file Syncs so far.
func (fs *FS) Syncs() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncs
}

func (fs *FS) check(op Op, path string) error {
	fs.hookMu.Lock()
	h := fs.hook
	fs.hookMu.Unlock()
	if h != nil {
		if err := h(op, path); err != nil {
			return &os.PathError{Op: op.String(), Path: path, Err: err}
		}
	}
	return nil
}

// begin runs the hook, then takes the lock unless the FS has crashed.
func (fs *FS) begin(op Op, path string) error {
	if err := fs.check(op, path); err != nil {
		return err
	}
	fs.mu.Lock()
	if fs.crashed {
		fs.mu.Unlock()
		return &os.PathError{Op: op.String(), Path: path, Err: ErrCrashed}
	}
	return nil
}

type dirOpKind int

const (
	opCreate dirOpKind = iota
	opRename
)

type dirOp struct {
	kind     dirOpKind
	dir      string
	from, to string // rename: from → to; create: to
}

type undo struct {
	off     int64
	old     []byte // bytes the write replaced (only those inside oldSize)
	oldSize int64
	n       int // bytes written
}

type file struct {
	fs     *FS
	inner  wal.File
	path   string // current name; renames update it
	undo   []undo
	closed bool
}

func (fs *FS) OpenFile(name string, flag int, perm os.FileMode) (wal.File, error) {
	if err := fs.begin(OpOpen, name); err != nil {
		return nil, err
	}
	defer fs.mu.Unlock()
	_, statErr := os.Stat(name)
	inner, err := fs.real.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	f := &file{fs: fs, inner: inner, path: name}
	fs.files[f] = struct{}{}
	// Truncating an existing file (O_TRUNC) is treated as durable at
	// once; the WAL truncates only stale files it is about to refill.
	if errors.Is(statErr, os.ErrNotExist) {
		fs.dirOps = append(fs.dirOps, dirOp{kind: opCreate, dir: filepath.Dir(name), to: name})
	}
	return f, nil
}

func (fs *FS) Rename(oldpath, newpath string) error {
	if err := fs.begin(OpRename, oldpath); err != nil {
		return err
	}
	defer fs.mu.Unlock()
	if err := fs.real.Rename(oldpath, newpath); err != nil {
		return err
	}
	for f := range fs.files {
		if f.path == oldpath {
			f.path = newpath
		}
	}
	fs.dirOps = append(fs.dirOps, dirOp{kind: opRename, dir: filepath.Dir(newpath), from: oldpath, to: newpath})
	return nil
}

func (fs *FS) Remove(name string) error {
	if err := fs.begin(OpRemove, name); err != nil {
		return err
	}
	defer fs.mu.Unlock()
	for f := range fs.files {
		if f.path == name {
			delete(fs.files, f)
		}
	}
	return fs.real.Remove(name)
}

func (fs *FS) ReadDir(dir string) ([]os.DirEntry, error) {
	if err := fs.begin(OpList, dir); err != nil {
		return nil, err
	}
	defer fs.mu.Unlock()
	return fs.real.ReadDir(dir)
}

func (fs *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.begin(OpMkdir, dir); err != nil {
		return err
	}
	defer fs.mu.Unlock()
	return fs.real.MkdirAll(dir, perm)
}

func (fs *FS) SyncDir(dir string) error {
	if err := fs.begin(OpSyncDir, dir); err != nil {
		return err
	}
	defer fs.mu.Unlock()
	if err := fs.real.SyncDir(dir); err != nil {
		return err
	}
	kept := fs.dirOps[:0]
	for _, op := range fs.dirOps {
		if op.dir != filepath.Clean(dir) {
			kept = append(kept, op)
		}
	}
	fs.dirOps = kept
	return nil
}

func (fs *FS) Lock(name string) (io.Closer, error) {
	if err := fs.begin(OpLock, name); err != nil {
		return nil, err
	}
	defer fs.mu.Unlock()
	return fs.real.Lock(name)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.begin(OpRead, f.path); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	return f.inner.ReadAt(p, off)
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.begin(OpWrite, f.path); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	size, err := f.inner.Size()
	if err != nil {
		return 0, err
	}
	u := undo{off: off, oldSize: size, n: len(p)}
	if off < size {
		u.old = make([]byte, min(int64(len(p)), size-off))
		if _, err := f.inner.ReadAt(u.old, off); err != nil {
			return 0, fmt.Errorf("faultfs: save bytes under write: %w", err)
		}
	}
	f.undo = append(f.undo, u)
	return f.inner.WriteAt(p, off)
}

// Sync forgets the file's undo records once the real fdatasync succeeded:
// only then may a power cut no longer take those bytes back. A failed Sync
// keeps them (after fsyncgate nothing is known about what reached the disk;
// the simulation assumes the worst).
func (f *file) Sync() error {
	if err := f.fs.begin(OpSync, f.path); err != nil {
		return err
	}
	defer f.fs.mu.Unlock()
	if err := f.inner.Sync(); err != nil {
		return err
	}
	f.undo = nil
	f.fs.syncs++
	if f.closed {
		delete(f.fs.files, f)
	}
	return nil
}

func (f *file) Size() (int64, error) {
	if err := f.fs.begin(OpRead, f.path); err != nil {
		return 0, err
	}
	defer f.fs.mu.Unlock()
	return f.inner.Size()
}

// Close always reaches the real file, also after Crash, so the process under
// test can release its descriptors and lock. A closed file's unsynced
// writes stay at the mercy of a power cut.
func (f *file) Close() error {
	f.fs.mu.Lock()
	f.closed = true
	if len(f.undo) == 0 {
		delete(f.fs.files, f)
	}
	f.fs.mu.Unlock()
	return f.inner.Close()
}

// Tear chooses what a power cut keeps of one file's unsynced writes: the
// first keep of them in full, and cut bytes of the next. sizes are the
// lengths of the writes, oldest first.
type Tear func(path string, sizes []int) (keep, cut int)

// TearRandomly keeps a random prefix of every file's unsynced writes, the
// first write it loses cut at a random byte: the torn tail a real disk can
// leave behind.
func TearRandomly(rng *rand.Rand) Tear {
	return func(_ string, sizes []int) (int, int) {
		keep := rng.IntN(len(sizes) + 1)
		if keep == len(sizes) {
			return keep, 0
		}
		return keep, rng.IntN(sizes[keep] + 1)
	}
}

// Crash simulates a power cut: every later call fails with ErrCrashed (Close
// still works), and the files on disk lose every write no successful Sync
// covered, and every creation and rename no SyncDir covered. A non-nil tear
// keeps part of the unsynced writes instead (see Tear). The caller then
// closes what it had open and reopens the directory through a new FS.
func (fs *FS) Crash(tear Tear) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashed = true
	var errs []error
	for f := range fs.files {
		if len(f.undo) == 0 {
			continue
		}
		keep, cut := 0, 0
		if tear != nil {
			sizes := make([]int, len(f.undo))
			for i, u := range f.undo {
				sizes[i] = u.n
			}
			keep, cut = tear(f.path, sizes)
		}
		if err := revert(f.path, f.undo, keep, cut); err != nil {
			errs = append(errs, err)
		}
	}
	for f := range fs.files {
		f.undo = nil
	}
	for i := len(fs.dirOps) - 1; i >= 0; i-- {
		op := fs.dirOps[i]
		var err error
		switch op.kind {
		case opRename:
			err = os.Rename(op.to, op.from)
		case opCreate:
			err = os.Remove(op.to)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("faultfs: undo %v: %w", op, err))
		}
	}
	fs.dirOps = nil
	return errors.Join(errs...)
}

// revert undoes writes[keep:] of the file at path, the write at keep only
// from byte cut on.
func revert(path string, writes []undo, keep, cut int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed or never made durable by SyncDir
		}
		return fmt.Errorf("faultfs: revert %s: %w", path, err)
	}
	defer f.Close()
	for i := len(writes) - 1; i >= keep; i-- {
		u := writes[i]
		from := 0
		if i == keep {
			from = cut
		}
		if from < len(u.old) {
			if _, err := f.WriteAt(u.old[from:], u.off+int64(from)); err != nil {
				return fmt.Errorf("faultfs: revert %s: %w", path, err)
			}
		}
		if err := f.Truncate(max(u.oldSize, u.off+int64(from))); err != nil {
			return fmt.Errorf("faultfs: revert %s: %w", path, err)
		}
	}
	return nil
}
