//go:build !picomq_faultfs

package node

import "github.com/PicoMQ/picomq/wal"

// testWALFS is nil in every real build: the WAL uses the real filesystem.
// Only a test-only build (tag picomq_faultfs, diskfull_faults.go) puts
// the fault-injecting filesystem under it.
func testWALFS(string) wal.FS { return nil }
