//go:build !linux

package picomq

// makePageBuffer is a plain make off Linux (hugepage_linux.go).
func makePageBuffer(n int) []byte { return make([]byte, n) }
