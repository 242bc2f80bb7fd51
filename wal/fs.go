package wal

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// FS is every filesystem operation the log performs. The default, OSFS, is
// the real operating system; tests substitute an implementation that fails
// chosen calls (EIO, ENOSPC) or simulates a power cut by dropping every byte
// no completed Sync covers (package wal/faultfs). Keeping the seam this
// small is what makes such a simulation exact: the log has no other way to
// reach the disk.
type FS interface {
	// OpenFile opens name like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	ReadDir(dir string) ([]os.DirEntry, error)
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on the file name (created if missing)
	// that the process loses when it dies; ErrLocked if another holder has
	// it. Closing the result releases it.
	Lock(name string) (io.Closer, error)
}

// File is an open segment file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable (fdatasync): once it returns nil,
	// a power cut cannot take back any byte written before the call.
	Sync() error
	Size() (int64, error)
}

// writeBacker is implemented by files that can start and await write-back
// of a range without a full sync (sync_file_range); preallocation uses it
// to keep zeros from piling up in the page cache. Optional: without it the
// final Sync writes everything.
type writeBacker interface {
	WriteBack(off, n int64) error
}

// OSFS is the real filesystem.
type OSFS struct{}

var _ FS = OSFS{}

func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) Rename(oldpath, newpath string) error        { return os.Rename(oldpath, newpath) }
func (OSFS) Remove(name string) error                    { return os.Remove(name) }
func (OSFS) ReadDir(dir string) ([]os.DirEntry, error)   { return os.ReadDir(dir) }
func (OSFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return errors.Join(err, d.Close())
	}
	return d.Close()
}

// Lock uses flock(2): the kernel drops it when the holder dies, so a crash
// never leaves the log locked.
func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, name)
		}
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	return f, nil
}

type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o osFile) Close() error                             { return o.f.Close() }

func (o osFile) Size() (int64, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Sync is fdatasync(2), repeated only on EINTR, which reports that the call
// was interrupted before doing anything, not that write-back failed; any
// other error is final (see "Failure" in the package doc).
func (o osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(o.f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

func (o osFile) WriteBack(off, n int64) error {
	flags := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	return unix.SyncFileRange(int(o.f.Fd()), off, n, flags)
}
