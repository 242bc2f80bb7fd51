package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

type line struct {
	t    trace.Time
	text string
}

// readTimeline prints the timeline of one cold read from the
// execution traces the cold-read row writes (e2e/benchmatrix with
// PICOMQ_BENCH_PROFILE_DIR): when each of the node's object-store GETs
// (a tiering/cache run goroutine: created, done) starts and ends, when
// each page request reaches the node's read handler and when it is
// answered, and where the handler's time went (waiting for the cache,
// waiting for the next request, writing, runnable, running); with the
// client's trace, when the client's page reads start and end. With
// several page requests in flight (one connection and handler goroutine
// each) the per-state totals add the handlers up; the last line gives
// the time no handler had a request to serve, and the first wave of GETs
// (those started before the handler first waits for one; the last is
// the demand GET the first page waits for). Both
// traces use the machine's monotonic clock, so the times are on one axis,
// in ms from the first page request. docs/benchmarks.md has the figures.
func readTimeline(node, client string) {
	var lines []line
	// The client: each page read is a goroutine running (*Records).readAhead's
	// read (or the iterator's own first read), from its first event inside
	// picoRead to its exit or return.
	var t0, tEnd trace.Time
	if client != "" {
		reading := map[trace.GoID]trace.Time{}
		goroutineEvents(client, func(e trace.Event) {
			st := e.StateTransition()
			g := st.Resource.Goroutine()
			_, to := st.Goroutine()
			stk := st.Stack
			if _, ok := reading[g]; !ok && stk != trace.NoStack && inside(stk, "(*stream).picoRead") {
				reading[g] = e.Time()
				if t0 == 0 {
					t0 = e.Time()
				}
			}
			if s, ok := reading[g]; ok && s != 0 && (to == trace.GoNotExist || (stk != trace.NoStack && !inside(stk, "(*stream).picoRead", "(*stream).Read"))) {
				lines = append(lines, line{s, fmt.Sprintf("client page read g%d, %.2f ms", g, float64(e.Time()-s)/1e6)})
				lines = append(lines, line{e.Time(), fmt.Sprintf("client page read g%d done", g)})
				tEnd = e.Time()
				reading[g] = 0
			}
		})
	}
	runs := map[trace.GoID]trace.Time{}
	// The first wave: the GETs started before the handler first waits for
	// one. The read path advises read-ahead before its first chunk read,
	// so the last of them is the demand GET the first page waits for.
	var wave []trace.GoID
	took := map[trace.GoID]time.Duration{}
	sent := map[trace.GoID]bool{}
	var firstWait, firstAnswer trace.Time
	handler := map[trace.GoID]bool{}
	state := map[trace.GoID]string{} // why a handler goroutine is not running
	since := map[trace.GoID]trace.Time{}
	total := map[string]time.Duration{}
	var first, last trace.Time
	// With reads ahead the client has more than one page request in
	// flight, on as many connections (one handler goroutine each): the
	// node is idle only while every handler waits for a request.
	busy := map[trace.GoID]bool{}
	var idleSince trace.Time
	var idle time.Duration
	goroutineEvents(node, func(e trace.Event) {
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if from == trace.GoNotExist && inside(e.Stack(), "startRunLocked") {
			runs[g] = e.Time()
			if firstWait == 0 {
				wave = append(wave, g)
			}
			lines = append(lines, line{e.Time(), fmt.Sprintf("  node GET g%d starts", g)})
		}
		if s, ok := runs[g]; ok && !sent[g] && st.Stack != trace.NoStack && inside(st.Stack, "ReadRange", "(*Store).ReadAt", "(*Store).get") {
			// First seen inside the store's call: the request is out
			// (read-ahead may have waited in the cache's queue before).
			sent[g] = true
			lines = append(lines, line{e.Time(), fmt.Sprintf("  node GET g%d sent, %.2f ms after it started", g, float64(e.Time()-s)/1e6)})
		}
		if s, ok := runs[g]; ok && to == trace.GoNotExist {
			took[g] = time.Duration(e.Time() - s)
			lines = append(lines, line{e.Time(), fmt.Sprintf("  node GET g%d done, %.2f ms", g, float64(e.Time()-s)/1e6)})
		}
		if st.Stack != trace.NoStack && inside(st.Stack, "pico.(*Handler).read") {
			handler[g] = true
		}
		if !handler[g] || (tEnd != 0 && e.Time() > tEnd) {
			return // not the handler, or after the client's last page
		}
		if s, ok := state[g]; ok && first != 0 {
			total[s] += time.Duration(e.Time() - since[g])
		}
		why := ""
		switch to {
		case trace.GoRunning:
			why = "running"
		case trace.GoRunnable:
			why = "runnable (scheduler)"
		case trace.GoSyscall:
			why = "syscall (socket)"
		case trace.GoWaiting:
			switch {
			case inside(st.Stack, "Cache).acquire"):
				why = "waiting for the cache (a GET)"
				if firstWait == 0 {
					firstWait = e.Time()
				}
				lines = append(lines, line{e.Time(), fmt.Sprintf("    node handler g%d waits for a GET", g)})
			case inside(st.Stack, "readRequest", "connReader", "backgroundRead", "abortPendingRead"):
				why = "waiting for the next request"
				if firstAnswer == 0 && firstWait != 0 {
					firstAnswer = e.Time()
				}
				lines = append(lines, line{e.Time(), fmt.Sprintf("    node handler g%d answered, waits for the next request", g)})
			default:
				why = "waiting (other)"
			}
		}
		if state[g] == "waiting for the next request" && to != trace.GoWaiting {
			lines = append(lines, line{e.Time(), fmt.Sprintf("    node handler g%d: request arrives", g)})
		}
		wasIdle := len(busy) == 0
		if why == "waiting for the next request" {
			delete(busy, g)
		} else {
			busy[g] = true
		}
		switch {
		case wasIdle && len(busy) > 0 && idleSince != 0:
			idle += time.Duration(e.Time() - idleSince)
		case !wasIdle && len(busy) == 0:
			idleSince = e.Time()
		}
		state[g], since[g] = why, e.Time()
		if first == 0 {
			first = e.Time()
		}
		last = e.Time()
	})
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.t - b.t) })
	if t0 == 0 && len(lines) > 0 {
		t0 = lines[0].t
	}
	for _, l := range lines {
		fmt.Printf("%9.2f  %s\n", float64(l.t-t0)/1e6, l.text)
	}
	pages := 0
	for _, l := range lines {
		if strings.HasPrefix(l.text, "client page read") && !strings.HasSuffix(l.text, "done") {
			pages++
		}
	}
	fmt.Printf("\n%d client page reads; the read handler's time, %.1f ms from its first event to the client's last page:\n", pages, float64(last-first)/1e6)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range total {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Printf("  %-32s %8.1f ms\n", k, float64(total[k])/1e6)
	}
	if n := len(wave); n > 0 && firstAnswer != 0 {
		var others []time.Duration
		for _, g := range wave[:n-1] {
			others = append(others, took[g])
		}
		slices.Sort(others)
		median := time.Duration(0)
		if len(others) > 0 {
			median = others[len(others)/2]
		}
		fmt.Printf("first wave: %d GETs before the handler first waited for one; the demand GET (the last, g%d) took %.1f ms, the others' median %.1f ms; first page answered at %.1f ms\n",
			n, wave[n-1], float64(took[wave[n-1]])/1e6, float64(median)/1e6, float64(firstAnswer-t0)/1e6)
	}
	fmt.Printf("%d handler goroutines; every one waiting for a request (the node idle between pages): %.1f ms\n", len(handler), float64(idle)/1e6)
}
