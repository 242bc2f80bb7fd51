package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// kafkaTimeline prints the timeline of one Kafka cold read from the
// execution traces the cold-read-kafka row writes (e2e/benchmatrix with
// PICOMQ_BENCH_PROFILE_DIR). The node: each request a connection
// goroutine handles (serveConn, from its wake-up with a frame to its next
// wait for one; a Fetch that waits for an object-store GET is marked),
// when the connection's writer finishes writing (its next wait), and each
// GET (a tiering/cache run goroutine, started by read-ahead advice or a
// reader's demand). The client (franz-go): for each fetch, when the
// source goroutine has queued the request, when the response wakes it,
// and when, decoded, it waits for a poll to take it (loopFetch) and is
// woken again; then each fetch split into the request's trip to the node,
// the node's handling, the response's trip back (the node's write and the
// client's read and parse) and the client's decode, and where the node's
// writer and the client's reader and fetch goroutines spent the read.
// A goroutine's wake-up has no stack in the trace, so wakes
// are found by the goroutine: its first event after such a wait. Times
// are ms from the first request the node handles, on the machine's
// monotonic clock (both traces).
func kafkaTimeline(node, client string) {
	var lines []line
	var t0 trace.Time
	// Node.
	runs := map[trace.GoID]trace.Time{}
	kind := map[trace.GoID]string{}
	idle := map[trace.GoID]bool{}           // a serveConn goroutine waiting for a frame
	handling := map[trace.GoID]trace.Time{} // since its wake-up with one
	getWait := map[trace.GoID]trace.Time{}
	writerIdle := map[trace.GoID]bool{}
	var reqs int
	var waited, handled time.Duration
	type span struct{ start, end trace.Time }
	var served []span // the node's requests, in order
	goroutineEvents(node, func(e trace.Event) {
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if from == trace.GoNotExist && inside(e.Stack(), "startRunLocked") {
			runs[g] = e.Time()
			kind[g] = "demand"
			if inside(e.Stack(), "Advise") {
				kind[g] = "read-ahead"
			}
			lines = append(lines, line{e.Time(), fmt.Sprintf("  node GET g%d starts (%s)", g, kind[g])})
		}
		if s, ok := runs[g]; ok && to == trace.GoNotExist {
			lines = append(lines, line{e.Time(), fmt.Sprintf("  node GET g%d done (%s), %.2f ms", g, kind[g], float64(e.Time()-s)/1e6)})
		}
		if idle[g] && to != trace.GoWaiting {
			idle[g] = false
			handling[g] = e.Time()
			if t0 == 0 {
				t0 = e.Time()
			}
		}
		if w, ok := getWait[g]; ok && to != trace.GoWaiting {
			waited += time.Duration(e.Time() - w)
			lines = append(lines, line{e.Time(), fmt.Sprintf("    node request on g%d: wait over, %.2f ms", g, float64(e.Time()-w)/1e6)})
			delete(getWait, g)
		}
		if writerIdle[g] && to != trace.GoWaiting {
			writerIdle[g] = false
		}
		if to != trace.GoWaiting || st.Stack == trace.NoStack {
			return
		}
		switch {
		case inside(st.Stack, "kafka.handleFetch"):
			getWait[g] = e.Time()
			lines = append(lines, line{e.Time(), fmt.Sprintf("    node request on g%d waits in handleFetch (for a GET, or the long poll)", g)})
		case waitsIn(st.Stack, "kafka.(*Server).serveConn"):
			idle[g] = true
			if s, ok := handling[g]; ok {
				reqs++
				handled += time.Duration(e.Time() - s)
				served = append(served, span{s, e.Time()})
				lines = append(lines, line{s, fmt.Sprintf("node request %d on g%d: %.2f ms", reqs, g, float64(e.Time()-s)/1e6)})
				lines = append(lines, line{e.Time(), fmt.Sprintf("node request %d answered (queued to the writer)", reqs)})
				delete(handling, g)
			}
		case waitsIn(st.Stack, "kafka.(*Server).writeReplies"):
			if !writerIdle[g] {
				lines = append(lines, line{e.Time(), "node writer done writing"})
			}
			writerIdle[g] = true
		}
	})
	// Client.
	type fetchState struct {
		sent, in, buffered, taken trace.Time
		phase                     int // 1 sent, 2 response in, 3 buffered
	}
	src := map[trace.GoID]*fetchState{}
	var done []fetchState // the client's fetches, in order
	var fetches int
	var inFlight, decoding, buffered, toNext time.Duration
	var lastTaken trace.Time
	if client != "" {
		goroutineEvents(client, func(e trace.Event) {
			st := e.StateTransition()
			g := st.Resource.Goroutine()
			_, to := st.Goroutine()
			f := src[g]
			if f != nil && to != trace.GoWaiting {
				switch f.phase {
				case 1:
					f.in, f.phase = e.Time(), 2
					inFlight += time.Duration(f.in - f.sent)
					lines = append(lines, line{e.Time(), fmt.Sprintf("client fetch %d: response in, %.2f ms after sent", fetches, float64(f.in-f.sent)/1e6)})
				case 3:
					f.taken, f.phase = e.Time(), 0
					buffered += time.Duration(f.taken - f.buffered)
					lastTaken = f.taken
					done = append(done, *f)
					lines = append(lines, line{e.Time(), fmt.Sprintf("client fetch %d: taken by a poll, %.2f ms after buffered", fetches, float64(f.taken-f.buffered)/1e6)})
				}
			}
			if to != trace.GoWaiting || st.Stack == trace.NoStack {
				return
			}
			switch {
			case inside(st.Stack, "(*broker).waitResp") && inside(st.Stack, "(*source).fetch"):
				if f == nil {
					f = &fetchState{}
					src[g] = f
				}
				fetches++
				if lastTaken != 0 {
					toNext += time.Duration(e.Time() - lastTaken)
				}
				f.sent, f.phase = e.Time(), 1
				lines = append(lines, line{e.Time(), fmt.Sprintf("client fetch %d sent", fetches)})
			case f != nil && f.phase == 2 && waitsIn(st.Stack, "(*source).loopFetch"):
				f.buffered, f.phase = e.Time(), 3
				decoding += time.Duration(f.buffered - f.in)
				lines = append(lines, line{e.Time(), fmt.Sprintf("client fetch %d: decoded and buffered, %.2f ms after the response", fetches, float64(f.buffered-f.in)/1e6)})
			}
		})
	}
	// Each client fetch against the last node request that starts
	// between its sending and its response (a new connection's
	// ApiVersions comes before the first Fetch): how long the request took
	// to reach the node (the client's write, the node's read and
	// scheduling), the node's handling, and the response's trip (the
	// node's write, the client's read and parse of the response).
	var toNode, atNode, back time.Duration
	var perFetch []string
	for i, f := range done {
		var r *span
		for k := range served {
			if served[k].start >= f.sent && served[k].start < f.in {
				r = &served[k]
			}
		}
		if r == nil {
			continue
		}
		perFetch = append(perFetch, fmt.Sprintf("fetch %d sent at %.2f ms: to the node %.2f ms, at the node %.2f ms, back %.2f ms, decode %.2f ms", i+1, float64(f.sent-t0)/1e6,
			float64(r.start-f.sent)/1e6, float64(r.end-r.start)/1e6, float64(f.in-r.end)/1e6, float64(f.buffered-f.in)/1e6))
		toNode += time.Duration(r.start - f.sent)
		atNode += time.Duration(r.end - r.start)
		back += time.Duration(f.in - r.end)
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.t - b.t) })
	for _, l := range lines {
		fmt.Printf("%9.2f  %s\n", float64(l.t-t0)/1e6, l.text)
	}
	fmt.Println()
	for _, p := range perFetch {
		fmt.Println(p)
	}
	fmt.Printf("\nt0 %d ns (the traces' clock)\nnode: %d requests handled in %.1f ms, of which waiting in handleFetch (GETs, long polls) %.1f ms\n", int64(t0), reqs, float64(handled)/1e6, float64(waited)/1e6)
	if fetches > 0 {
		fmt.Printf("client: %d fetches; sent to response in %.1f ms, response to buffered (decode) %.1f ms, buffered to taken by a poll %.1f ms, taken to the next sent %.1f ms\n",
			fetches, float64(inFlight)/1e6, float64(decoding)/1e6, float64(buffered)/1e6, float64(toNext)/1e6)
		fmt.Printf("sent to response in, split: request to the node %.1f ms, at the node %.1f ms, answer to the client's response in %.1f ms\n",
			float64(toNode)/1e6, float64(atNode)/1e6, float64(back)/1e6)
		if len(done) > 0 {
			from, to := done[0].sent, done[len(done)-1].taken
			for _, w := range []struct{ who, path, fn string }{
				{"node writer", node, "kafka.(*Server).writeReplies"},
				{"client reader", client, "kgo.(*brokerCxn).handleResps"},
				{"client fetch goroutine", client, "kgo.(*source).loopFetch"},
			} {
				fmt.Printf("%s, first fetch sent to last taken:", w.who)
				st := stateTimes(w.path, w.fn, from, to)
				for _, k := range slices.Sorted(maps.Keys(st)) {
					fmt.Printf(" %s %.1f ms;", k, float64(st[k])/1e6)
				}
				fmt.Println()
			}
			fmt.Printf("first fetch sent to last taken: %.1f ms; GC mark phases in it: node %.1f ms, client %.1f ms\n",
				float64(to-from)/1e6, float64(gcTime(node, from, to))/1e6, float64(gcTime(client, from, to))/1e6)
		}
	}
}

// waitsIn reports whether the innermost frame of s outside the runtime
// (and the select or channel code it parks in) is in function fn: the
// goroutine waits there, not somewhere deeper called from it.
func waitsIn(s trace.Stack, fn string) bool {
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "runtime.") {
			continue
		}
		return strings.Contains(f.Func, fn)
	}
	return false
}

// gcTime sums the GC mark phases in the trace at path between from and
// to (trace times).
func gcTime(path string, from, to trace.Time) time.Duration {
	var total time.Duration
	var begin trace.Time
	events(path, func(e trace.Event) {
		switch {
		case e.Kind() == trace.EventRangeBegin && e.Range().Name == "GC concurrent mark phase":
			begin = e.Time()
		case e.Kind() == trace.EventRangeEnd && e.Range().Name == "GC concurrent mark phase" && begin != 0:
			if a, b := max(begin, from), min(e.Time(), to); b > a {
				total += time.Duration(b - a)
			}
			begin = 0
		}
	})
	return total
}

// stateTimes sums, for the goroutines whose stacks ever contain fn, the
// time in each state between from and to (trace times), a waiting state
// named by the innermost non-runtime frame it waits in: where a
// connection's writer or reader spends a response's trip.
func stateTimes(path, fn string, from, to trace.Time) map[string]time.Duration {
	total := map[string]time.Duration{}
	ours := map[trace.GoID]bool{}
	state := map[trace.GoID]string{}
	since := map[trace.GoID]trace.Time{}
	goroutineEvents(path, func(e trace.Event) {
		st := e.StateTransition()
		g := st.Resource.Goroutine()
		_, nt := st.Goroutine()
		if st.Stack != trace.NoStack && inside(st.Stack, fn) {
			ours[g] = true
		}
		if !ours[g] {
			return
		}
		if s, ok := state[g]; ok {
			a, b := max(since[g], from), min(e.Time(), to)
			if b > a {
				total[s] += time.Duration(b - a)
			}
		}
		name := nt.String()
		if nt == trace.GoWaiting {
			name = "waiting in " + innermost(st.Stack)
		}
		state[g], since[g] = name, e.Time()
	})
	return total
}

// innermost names the innermost frame of s outside the runtime.
func innermost(s trace.Stack) string {
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "runtime.") {
			continue
		}
		return f.Func[strings.LastIndex(f.Func, "/")+1:]
	}
	return "?"
}
