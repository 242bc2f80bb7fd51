package main

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

// replTimeline reads the owner's (a) and one follower's (b) execution
// traces of the same 1-client replicated point and follows each append
// across both processes: the owner's sends, the follower's wake-up, its
// answer, the owner's answer reader, and the owner's own fdatasync. The
// Go trace clock is the system's monotonic clock on Linux, so the two
// traces' timestamps compare directly.
func replTimeline(ownerPath, followerPath string) {
	type span struct{ start, end trace.Time }
	var sends [][2]span // per append: the two sends (first and second)
	var syncs []span    // per append: the owner's fdatasync
	var appends []span  // per append: request read to answer write
	var readerWake []trace.Time
	var localBefore, localTotal []time.Duration // every append, with sends or not
	// owner
	type og struct {
		part   string
		at     trace.Time
		cur    *[2]span
		nsend  int
		sync   span
		start  trace.Time
		inRecv bool
		// reading: waiting for the next request
		reading bool
	}
	gs := map[trace.GoID]*og{}
	goroutineEvents(ownerPath, func(e trace.Event) {
		st := e.StateTransition()
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		t := e.Time()
		g := gs[id]
		if g == nil {
			g = &og{}
			gs[id] = g
		}
		http := inside(st.Stack, "h1lane")
		if from == trace.GoSyscall && g.part == "send" && g.cur != nil && g.nsend <= 2 {
			g.cur[g.nsend-1].end = t
		}
		if from == trace.GoSyscall && g.part == "fdatasync" {
			g.sync.end = t
		}
		if g.inRecv && to == trace.GoRunnable {
			readerWake = append(readerWake, t)
			g.inRecv = false
		}
		g.part = ""
		switch {
		case to == trace.GoWaiting && inside(st.Stack, "readAnswers"):
			g.inRecv = true
		case to == trace.GoSyscall && inside(st.Stack, "clientConn).Send"):
			if g.cur == nil {
				g.cur = &[2]span{}
				g.nsend = 0
			}
			g.nsend++
			if g.nsend <= 2 {
				g.cur[g.nsend-1].start = t
			}
			g.part = "send"
		case to == trace.GoSyscall && inside(st.Stack, "Fdatasync", "fdatasync"):
			g.sync = span{start: t}
			g.part = "fdatasync"
		case to == trace.GoSyscall && http && inside(st.Stack, "bufio.(*Writer).Flush") && !inside(st.Stack, "replication"):
			if g.sync.end != 0 && g.start != 0 {
				localBefore = append(localBefore, time.Duration(g.sync.start-g.start))
				localTotal = append(localTotal, time.Duration(t-g.start))
			}
			if g.cur != nil && g.nsend == 2 && g.sync.end != 0 {
				sends = append(sends, *g.cur)
				syncs = append(syncs, g.sync)
				appends = append(appends, span{g.start, t})
			}
			g.cur, g.sync, g.start = nil, span{}, 0
		}
		// Leaving the wait for the next request starts an append (as
		// appendParts does).
		if (from == trace.GoWaiting || from == trace.GoSyscall) && g.reading {
			g.start = t
		}
		g.reading = appendPart(to, st.Stack, http) == "request read"
		g.at = t
	})
	// follower
	var fWake, fRun []trace.Time
	var fAnswer []span
	type fg struct {
		inRead, woke bool
		answering    bool
		ans          span
	}
	fgs := map[trace.GoID]*fg{}
	goroutineEvents(followerPath, func(e trace.Event) {
		st := e.StateTransition()
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		t := e.Time()
		g := fgs[id]
		if g == nil {
			g = &fg{}
			fgs[id] = g
		}
		if g.answering && from == trace.GoSyscall {
			g.ans.end = t
			fAnswer = append(fAnswer, g.ans)
			g.answering = false
		}
		if g.inRead && to == trace.GoRunnable {
			fWake = append(fWake, t)
			g.inRead, g.woke = false, true
		}
		if g.woke && to == trace.GoRunning {
			fRun = append(fRun, t)
			g.woke = false
		}
		if to == trace.GoWaiting && inside(st.Stack, "serverConn).readLoop") {
			g.inRead = true
		}
		if to == trace.GoSyscall && inside(st.Stack, "serverConn).answer") {
			g.answering, g.ans = true, span{start: t}
		}
	})
	med := func(name string, d []time.Duration) {
		if len(d) == 0 {
			fmt.Printf("  %-58s none\n", name)
			return
		}
		slices.Sort(d)
		fmt.Printf("  %-58s p50 %8v  p90 %8v  (n %d)\n", name, d[len(d)/2].Round(time.Microsecond/10), d[len(d)*9/10].Round(time.Microsecond/10), len(d))
	}
	if len(sends) == 0 || len(fWake) == 0 {
		fmt.Printf("%s: no appends with two sends (a local point?)\n", ownerPath)
		med("owner: append, request read to answer write", localTotal)
		med("owner: request read to the start of its fdatasync", localBefore)
		return
	}
	// For each append: which send woke b (the follower request that
	// became runnable after the first send started and before the
	// append's fsync ended), and the follower's answer after it.
	var hop1, hop1run, fwork, hop2, inSend, send1, send2, syncDur, beforeSync, total []time.Duration
	var duringFirst, duringSecond int
	after := func(ts []trace.Time, t trace.Time) int {
		i, _ := slices.BinarySearch(ts, t)
		return i
	}
	slices.Sort(fWake)
	slices.Sort(fRun)
	slices.Sort(readerWake)
	slices.SortFunc(fAnswer, func(a, b span) int { return int(a.start - b.start) })
	for k, s := range sends {
		sy, ap := syncs[k], appends[k]
		send1 = append(send1, time.Duration(s[0].end-s[0].start))
		send2 = append(send2, time.Duration(s[1].end-s[1].start))
		syncDur = append(syncDur, time.Duration(sy.end-sy.start))
		if ap.start > 0 {
			beforeSync = append(beforeSync, time.Duration(sy.start-ap.start))
			total = append(total, time.Duration(ap.end-ap.start))
		}
		i := after(fWake, s[0].start)
		if i >= len(fWake) || fWake[i] > ap.end {
			continue
		}
		w := fWake[i]
		// which send was it (b is either follower)
		var from span
		switch {
		case w < s[1].start:
			from = s[0]
			if w <= s[0].end {
				duringFirst++
			}
		default:
			from = s[1]
			if w <= s[1].end {
				duringSecond++
			}
		}
		hop1 = append(hop1, time.Duration(w-from.start))
		if w <= from.end {
			inSend = append(inSend, time.Duration(from.end-w))
		}
		if j := after(fRun, w); j < len(fRun) {
			hop1run = append(hop1run, time.Duration(fRun[j]-w))
		}
		j := slices.IndexFunc(fAnswer, func(a span) bool { return a.start >= w })
		if j < 0 {
			continue
		}
		fwork = append(fwork, time.Duration(fAnswer[j].start-w))
		if r := after(readerWake, fAnswer[j].start); r < len(readerWake) {
			hop2 = append(hop2, time.Duration(readerWake[r]-fAnswer[j].start))
		}
	}
	fmt.Printf("%s + %s: %d appends with two sends\n", ownerPath, followerPath, len(sends))
	med("owner: append, request read to answer write", total)
	med("owner: request read to the start of its fdatasync", beforeSync)
	med("owner: first send (write syscall)", send1)
	med("owner: second send (write syscall)", send2)
	med("owner: fdatasync", syncDur)
	med("follower: runnable after the owner's send started", hop1)
	med("follower: of that, before the send returned", inSend)
	med("follower: running after runnable", hop1run)
	med("follower: runnable to its answer's write", fwork)
	med("owner: answer reader runnable after the answer's write", hop2)
	fmt.Printf("  follower woke before the first send returned: %d, before the second returned: %d, of %d\n", duringFirst, duringSecond, len(hop1))
}
