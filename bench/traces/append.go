package main

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

// appendParts reads an owner's execution trace taken during an append
// row (e2e/benchmatrix with PICOMQ_BENCH_PROFILE_DIR writes
// node-repl-…-<durability>-c<clients>-a.trace for the replicated rows)
// and prints where an append's time went on its HTTP goroutine: from the
// moment the goroutine stops waiting for the request to the write of its
// answer, split by the goroutine's state and, for syscalls and waits, by
// what it was doing (the replication sends, the WAL's pwrite and
// fdatasync, the wait for the followers, the wait for the WAL writer).
// Comparing the replicated and local traces of one run shows what
// replication adds to an append (docs/benchmarks.md, issue 32).
func appendParts(path string) {
	type goState struct {
		in   map[string]time.Duration // the current append's parts; nil between appends
		part string                   // what the goroutine is doing since at
		at   trace.Time
	}
	gs := map[trace.GoID]*goState{}
	sum := map[string]time.Duration{}
	var totals []time.Duration
	goroutineEvents(path, func(e trace.Event) {
		st := e.StateTransition()
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		t := e.Time()
		g := gs[id]
		if g == nil {
			g = &goState{}
			gs[id] = g
		}
		if g.in != nil && g.at != 0 {
			g.in[g.part] += time.Duration(t - g.at)
		}
		stack := st.Stack
		http := inside(stack, "h1lane")
		// The answer's write ends an append (the replication sends are
		// writes too, on the same goroutine).
		if to == trace.GoSyscall && http && inside(stack, "bufio.(*Writer).Flush") && !inside(stack, "replication") && g.in != nil {
			var total time.Duration
			for k, d := range g.in {
				sum[k] += d
				total += d
			}
			totals = append(totals, total)
			g.in = nil
		}
		// Leaving the wait for the next request starts one.
		if (from == trace.GoWaiting || from == trace.GoSyscall) && g.part == "request read" && g.in == nil {
			g.in = map[string]time.Duration{}
		}
		g.part, g.at = appendPart(to, stack, http), t
	})
	if len(totals) == 0 {
		fmt.Println("no appends found in", path)
		return
	}
	slices.Sort(totals)
	var all time.Duration
	for _, d := range totals {
		all += d
	}
	n := time.Duration(len(totals))
	fmt.Printf("%s: %d appends, median %v, mean %v (request read to answer write, on the HTTP goroutine)\n",
		path, len(totals), totals[len(totals)/2], all/n)
	var parts []string
	for k := range sum {
		parts = append(parts, k)
	}
	slices.Sort(parts)
	for _, k := range parts {
		fmt.Printf("  %-24s %10v per append\n", k, (sum[k] / n).Round(100*time.Nanosecond))
	}
}

// appendPart names what a goroutine entering state to with stack does.
func appendPart(to trace.GoState, stack trace.Stack, http bool) string {
	switch to {
	case trace.GoSyscall:
		switch {
		case inside(stack, "clientConn).Send"):
			return "syscall: replication send"
		case inside(stack, "Fdatasync", "fdatasync"):
			return "syscall: fdatasync"
		case inside(stack, "pwrite"):
			return "syscall: pwrite"
		case http && inside(stack, "bufio.(*Reader)"):
			return "request read"
		}
		return "syscall: other"
	case trace.GoWaiting:
		switch {
		case inside(stack, "waitReplicated"):
			return "wait: followers"
		case inside(stack, "wal."):
			return "wait: WAL"
		case http && inside(stack, "bufio.(*Reader)", "conn).next"):
			return "request read"
		}
		return "wait: other"
	case trace.GoRunnable:
		return "runnable (scheduler)"
	case trace.GoRunning:
		return "running"
	}
	return "other"
}
