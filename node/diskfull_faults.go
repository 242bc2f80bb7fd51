//go:build picomq_faultfs

package node

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/PicoMQ/picomq/wal"
	"github.com/PicoMQ/picomq/wal/faultfs"
)

// DiskFullFlag is the file whose presence in the data dir makes every
// WAL write fail with ENOSPC (see testWALFS).
const DiskFullFlag = "fault-disk-full"

// testWALFS: in a binary built with the test-only tag picomq_faultfs (the
// e2e soak builds one; releases never do) the WAL runs over the
// fault-injecting filesystem, and while the file DiskFullFlag exists in
// the data dir every WAL write, segment zero-fill included, fails with
// ENOSPC exactly as on a full disk. This is the soak's disk-full fault: a
// loopback filesystem or a quota needs privileges the tests do not have.
func testWALFS(dataDir string) wal.FS {
	flag := filepath.Join(dataDir, DiskFullFlag)
	fs := faultfs.New()
	fs.SetHook(func(op faultfs.Op, _ string) error {
		if op != faultfs.OpWrite {
			return nil
		}
		if _, err := os.Stat(flag); err == nil {
			return syscall.ENOSPC
		}
		return nil
	})
	return fs
}
