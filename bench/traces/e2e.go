package main

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

// tailEndToEnd reads the node's and the client's execution traces of the
// live-tail row (node-live-tail.trace, client-live-tail.trace) and prints,
// for every measured append, the time between the steps from the client's
// request write to the bench's reader receiving the record, on both sides.
// Both processes stamp their traces with the same monotonic clock (Linux:
// CLOCK_MONOTONIC), so one timeline holds both; each step is the first of
// its kind after the previous one, and appends whose steps span more than
// 50 ms are left out (the next append comes 5 ms later).
func tailEndToEnd(node, client string) {
	n := tailSteps(node, false)
	c := tailSteps(client, true)
	chain := []struct {
		name string
		ts   []trace.Time
	}{
		{"client writes the append", c["append write"]},
		{"node reads it", n["request read"]},
		{"node writes the WAL", n["wal pwrite"]},
		{"fdatasync starts", n["fdatasync start"]},
		{"fdatasync ends", n["fdatasync end"]},
		{"SSE handler made runnable", n["wake sse"]},
		{"SSE handler running", n["run sse"]},
		{"SSE write syscall", n["sse write"]},
		{"client SSE reader made runnable", c["wake sse"]},
		{"client SSE reader running", c["run sse"]},
		{"bench reader made runnable", c["wake recv"]},
		{"bench reader running", c["run recv"]},
	}
	if d := c["delivered"]; len(d) > 0 {
		// The bench took its records in SubscribeOptions.OnEvent, on the
		// SSE reader's goroutine: no hand-over to a reader goroutine; the
		// chain ends where the reader logged the delivery (its clock read).
		chain = append(chain[:len(chain)-2], struct {
			name string
			ts   []trace.Time
		}{"OnEvent takes the record (bench reader)", d})
	}
	seg := make([][]time.Duration, len(chain))
	var total []time.Duration
	var rows [][]time.Duration // each append's steps, for the slowest
	appends := chain[0].ts
	if len(appends) > 0 {
		// The first is the row's unmeasured first record (the stream's
		// first append, which waits for its offset reservation in etcd).
		appends = appends[1:]
	}
	for _, t0 := range appends {
		prev, row := t0, make([]time.Duration, 0, len(chain))
		for _, s := range chain[1:] {
			i, _ := slices.BinarySearch(s.ts, prev)
			if i == len(s.ts) || s.ts[i]-t0 > trace.Time(50*time.Millisecond) {
				row = nil
				break
			}
			row = append(row, time.Duration(s.ts[i]-prev))
			prev = s.ts[i]
		}
		if row == nil {
			continue
		}
		for i, d := range row {
			seg[i+1] = append(seg[i+1], d)
		}
		total = append(total, time.Duration(prev-t0))
		rows = append(rows, row)
	}
	for i := 1; i < len(chain); i++ {
		showDurations("-> "+chain[i].name, seg[i])
	}
	showSlowest(chain[1:], rows, total)
	showDurations("client append write -> bench reader has the record", total)
}

// showSlowest prints the steps of the slowest 2% of appends (at least
// 3): the p99 is made of these, and a step that dominates them (the
// fdatasync, a wait for a core, a GC) says whose the tail latency is.
func showSlowest(chain []struct {
	name string
	ts   []trace.Time
}, rows [][]time.Duration, total []time.Duration) {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(total[b] - total[a]) })
	n := min(len(idx), max(3, len(idx)/50))
	fmt.Printf("slowest %d of %d appends, each step in µs:\n", n, len(idx))
	for j, s := range chain {
		fmt.Printf("  %-40s", s.name)
		for _, i := range idx[:n] {
			fmt.Printf(" %6d", rows[i][j].Microseconds())
		}
		fmt.Println()
	}
	fmt.Printf("  %-40s", "total")
	for _, i := range idx[:n] {
		fmt.Printf(" %6d", total[i].Microseconds())
	}
	fmt.Println()
}

// tailSteps returns the times of the steps tailEndToEnd chains, by kind,
// in order, from one process's trace.
func tailSteps(path string, client bool) map[string][]trace.Time {
	k := map[string][]trace.Time{}
	parked := map[trace.GoID]string{} // what a goroutine waits for
	woken := map[trace.GoID]string{}
	events(path, func(e trace.Event) {
		if client && e.Kind() == trace.EventLog && e.Log().Category == "picomq-bench" && e.Log().Message == "delivered" {
			k["delivered"] = append(k["delivered"], e.Time())
			return
		}
		if e.Kind() != trace.EventStateTransition || e.StateTransition().Resource.Kind != trace.ResourceGoroutine {
			return
		}
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		add := func(kind string) { k[kind] = append(k[kind], e.Time()) }
		switch {
		case from == trace.GoRunning && to == trace.GoSyscall:
			switch {
			case client && inside(st.Stack, "roundTrip") && inside(st.Stack, "Write"):
				add("append write")
			case client:
			case inside(st.Stack, "h1lane") && inside(st.Stack, "syscall.read"):
				add("request read")
			case inside(st.Stack, "wal.(*WAL).write"):
				add("wal pwrite")
			case inside(st.Stack, "Fdatasync"):
				add("fdatasync start")
				parked[g] = "fdatasync"
			case inside(st.Stack, "(*Handler).sse") && inside(st.Stack, "Write", "write"):
				add("sse write")
			}
		case from == trace.GoSyscall && parked[g] == "fdatasync":
			delete(parked, g)
			add("fdatasync end")
		case from == trace.GoRunning && to == trace.GoWaiting:
			switch {
			case client && inside(st.Stack, "readChunkLine"):
				parked[g] = "sse"
			case client && inside(st.Stack, "fanout.func1"):
				parked[g] = "recv"
			case !client && inside(st.Stack, "sseWait"):
				parked[g] = "sse"
			}
		case from == trace.GoWaiting && to == trace.GoRunnable:
			if p := parked[g]; p != "" {
				delete(parked, g)
				woken[g] = p
				add("wake " + p)
			}
		case from == trace.GoRunnable && to == trace.GoRunning:
			if p := woken[g]; p != "" {
				delete(woken, g)
				add("run " + p)
			}
		}
	})
	return k
}

func showDurations(name string, d []time.Duration) {
	slices.Sort(d)
	if len(d) == 0 {
		fmt.Printf("%-46s none\n", name)
		return
	}
	p := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	fmt.Printf("%-46s n=%d p50 %v p90 %v p99 %v\n", name, len(d), p(0.5), p(0.9), p(0.99))
}
