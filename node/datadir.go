package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFileName is the data dir's lock file. The embedded etcd and the WAL
// each lock their own files, but the embedded etcd waits forever for its
// database lock: without a lock taken first, a second node on the same data
// dir would hang silently holding two ports.
const lockFileName = "picomq.lock"

// dataDirLock is an exclusive flock on <data-dir>/picomq.lock, held for the
// process's life (the kernel releases it when the process dies, even by
// kill -9). The file holds the owner's pid, so the second node can say who
// has the directory.
type dataDirLock struct{ f *os.File }

// lockDataDir creates dir if needed and locks it without waiting.
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				return nil, fmt.Errorf("data dir %s in use by pid %d", dir, pid)
			}
			return nil, fmt.Errorf("data dir %s in use by another process (%s is locked)", dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &dataDirLock{f: f}, nil
}

// release unlocks the data dir; the file stays (deleting it would race a
// node that opened it and is about to lock it).
func (l *dataDirLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

// SettingError is a start-up failure caused by a setting: an invalid value,
// or a resource the setting names that cannot be used (a port in use, an
// object store that cannot be opened, a data dir that is locked). cmd/picomq
// exits 2 for these and 1 for every other failure.
type SettingError struct {
	Setting string // the flag, e.g. "--http-addr"; empty when Err names it already
	Err     error
}

func (e *SettingError) Error() string {
	if e.Setting == "" {
		return oneLine(e.Err.Error())
	}
	return e.Setting + ": " + oneLine(e.Err.Error())
}
func (e *SettingError) Unwrap() error { return e.Err }

func settingErr(setting string, err error) error { return &SettingError{Setting: setting, Err: err} }

// oneLine keeps a start-up failure on one line: some errors from libraries
// (etcd, the AWS SDK) span several.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// lineError is a start-up failure printed on one line.
type lineError struct{ err error }

func (e lineError) Error() string { return oneLine(e.err.Error()) }
func (e lineError) Unwrap() error { return e.err }
