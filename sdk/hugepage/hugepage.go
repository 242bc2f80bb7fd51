// Package hugepage asks the kernel to back fresh, large buffers with
// transparent huge pages before they are first written.
//
// Why: the node's block cache and the Go client read large object and
// page bodies (1-8 MiB) into memory the process has not touched yet: a
// cold node's cache runs, a catch-up's page buffers (their records alias
// them, so they cannot be reused). Each 4 KiB page of such memory faults
// on its first write, inside the read syscall, and on a VM a fault costs
// several times the copy it interrupts: 3-4 us per 4 KiB here, about
// 225 ms of CPU per 64 MiB read against 55 ms into reused memory
// (docs/benchmarks.md, "Fresh pages" and "Catch-up: fresh page memory in
// huge pages"). With MADV_HUGEPAGE the kernel faults 2 MiB at a time.
//
// The advice is a hint and only that: it changes no contents, an error
// is ignored, and where the system's THP setting is "never" it does
// nothing. GODEBUG=disablethp=1, the Go runtime's own switch that keeps
// transparent huge pages off its heap, turns it off here too (for a
// kernel whose THP "defrag" setting makes an advised fault wait for
// memory compaction). Off Linux both functions fall back to plain
// memory.
package hugepage

import (
	"os"
	"strings"
)

// Size is a transparent huge page on Linux with 4 KiB base pages
// (x86-64, arm64).
const Size = 2 << 20

// off is set by GODEBUG=disablethp=1.
var off = disabled(os.Getenv("GODEBUG"))

// disabled reports whether a GODEBUG value turns disablethp on (the last
// setting of it wins and nothing is trimmed, as in the runtime).
func disabled(godebug string) bool {
	on := false
	for _, kv := range strings.Split(godebug, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "disablethp" {
			on = v == "1"
		}
	}
	return on
}
