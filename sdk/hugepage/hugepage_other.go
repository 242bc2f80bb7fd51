//go:build !linux

package hugepage

import "unsafe"

// Advise does nothing off Linux.
func Advise(buf []byte) int64 { return 0 }

// Make is a plain make off Linux.
func Make(n int) []byte { return make([]byte, n) }

// Advised is false off Linux.
func Advised(unsafe.Pointer) (bool, error) { return false, nil }
