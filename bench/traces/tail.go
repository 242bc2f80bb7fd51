package main

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

// tailLatency reads a node's execution trace taken during the
// live-tail row (e2e/benchmatrix with PICOMQ_BENCH_PROFILE_DIR writes
// node-live-tail.trace) and prints, over every record delivered by SSE,
// the time from the end of the fdatasync that made it durable to the SSE
// handler's write syscall, split into its parts: the publish (fsync end to
// the handler made runnable), the scheduler (runnable to running) and the
// handler's own work (read the page, render, write). docs/benchmarks.md
// has the figures.
func tailLatency(node string) {
	inSync := map[trace.GoID]bool{}
	var syncEnds []trace.Time
	wakeT := map[trace.GoID]trace.Time{}
	parked := map[trace.GoID]bool{} // SSE handlers waiting in WaitFor
	runT := map[trace.GoID]trace.Time{}
	var pub, sched, work, total []time.Duration
	goroutineEvents(node, func(e trace.Event) {
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		t := e.Time()
		switch {
		case from == trace.GoRunning && to == trace.GoSyscall:
			if inside(st.Stack, "Fdatasync", "fdatasync") {
				inSync[g] = true
			} else if inside(st.Stack, "(*Handler).sse") && inside(st.Stack, "Write", "write") {
				if w, ok := wakeT[g]; ok {
					i, _ := slices.BinarySearch(syncEnds, w)
					if i > 0 {
						se := syncEnds[i-1]
						pub = append(pub, time.Duration(w-se))
						sched = append(sched, time.Duration(runT[g]-w))
						work = append(work, time.Duration(t-runT[g]))
						total = append(total, time.Duration(t-se))
					}
					delete(wakeT, g)
				}
			}
		case from == trace.GoSyscall && inSync[g]:
			delete(inSync, g)
			syncEnds = append(syncEnds, t)
		case from == trace.GoRunning && to == trace.GoWaiting:
			if inside(st.Stack, "sseWait") {
				parked[g] = true
			}
		case from == trace.GoWaiting && to == trace.GoRunnable:
			if parked[g] {
				delete(parked, g)
				wakeT[g] = t
			}
		case from == trace.GoRunnable && to == trace.GoRunning:
			if _, ok := wakeT[g]; ok {
				runT[g] = t
			}
		}
	})
	show := func(name string, d []time.Duration) {
		slices.Sort(d)
		if len(d) == 0 {
			fmt.Printf("%-48s none\n", name)
			return
		}
		p := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
		fmt.Printf("%-48s n=%d p50 %v p90 %v p99 %v\n", name, len(d), p(0.5), p(0.9), p(0.99))
	}
	fmt.Printf("fdatasyncs seen: %d\n", len(syncEnds))
	show("fsync end -> reader made runnable (publish, wake)", pub)
	show("runnable -> running (scheduler)", sched)
	show("running -> SSE write syscall (read, render)", work)
	show("fsync end -> SSE write syscall (total)", total)
}
