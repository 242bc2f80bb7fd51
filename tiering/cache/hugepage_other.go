//go:build !linux

package cache

// adviseHugePages is Linux-only (madvise MADV_HUGEPAGE); elsewhere a run's
// buffer is left to the system's defaults.
func adviseHugePages([]byte) int64 { return 0 }
