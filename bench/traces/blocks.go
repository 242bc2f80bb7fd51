package main

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// blockedFor prints every time a goroutine of the trace at path waited,
// was in a syscall, or was runnable without a core for at least min: when
// it began, how long, and the innermost frames of the stack it stopped
// in. The live tail's p99 is a few slow appends among 600; whether they
// waited for the disk, for a lock, for the registry or for a core is what
// tells the machine's share from the node's.
func blockedFor(path string, min time.Duration) {
	type stop struct {
		at    trace.Time
		state trace.GoState
		stack string
	}
	open := map[trace.GoID]stop{}
	events(path, func(e trace.Event) {
		if e.Kind() != trace.EventStateTransition || e.StateTransition().Resource.Kind != trace.ResourceGoroutine {
			return
		}
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if s, ok := open[g]; ok && from == s.state {
			delete(open, g)
			if d := time.Duration(e.Time() - s.at); d >= min {
				fmt.Printf("%12.3f ms  g%-6d %-9v %8.3f ms  %s\n", float64(s.at)/1e6, g, s.state, d.Seconds()*1e3, s.stack)
			}
		}
		if to == trace.GoWaiting || to == trace.GoSyscall || to == trace.GoRunnable {
			open[g] = stop{at: e.Time(), state: to, stack: innerFrames(st.Stack, 4)}
		}
	})
}

// innerFrames renders the n innermost frames of s outside the runtime.
func innerFrames(s trace.Stack, n int) string {
	var fs []string
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "runtime.") || strings.HasPrefix(f.Func, "internal/") || strings.HasPrefix(f.Func, "syscall.") {
			continue
		}
		fs = append(fs, f.Func[strings.LastIndex(f.Func, "/")+1:])
		if len(fs) == n {
			break
		}
	}
	return strings.Join(fs, " < ")
}
