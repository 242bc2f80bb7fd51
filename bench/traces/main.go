// Command traces reads the execution traces that e2e/benchmatrix writes
// with PICOMQ_BENCH_PROFILE_DIR and prints what a benchmark row's time
// went to (docs/benchmarks.md has the figures):
//
//	traces read DIR/node-cold-read.trace [DIR/client-cold-read.trace]
//	traces kafka DIR/node-cold-read-kafka.trace [DIR/client-cold-read-kafka.trace]
//	traces tail DIR/node-live-tail.trace
//	traces append DIR/node-repl-r1-replicated-c1-a.trace
//	traces e2e DIR/node-live-tail.trace DIR/client-live-tail.trace
//	traces repl DIR/node-repl-r1-replicated-c1-a.trace DIR/node-repl-r1-replicated-c1-b.trace
//	traces blocks DIR/node-live-tail.trace 1ms
//
// A module of its own, for golang.org/x/exp/trace:
//
//	cd bench/traces && go run . read DIR/node-cold-read.trace DIR/client-cold-read.trace
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	switch {
	case len(os.Args) == 3 && os.Args[1] == "read":
		readTimeline(os.Args[2], "")
	case len(os.Args) == 4 && os.Args[1] == "read":
		readTimeline(os.Args[2], os.Args[3])
	case len(os.Args) == 3 && os.Args[1] == "kafka":
		kafkaTimeline(os.Args[2], "")
	case len(os.Args) == 4 && os.Args[1] == "kafka":
		kafkaTimeline(os.Args[2], os.Args[3])
	case len(os.Args) == 3 && os.Args[1] == "tail":
		tailLatency(os.Args[2])
	case len(os.Args) >= 3 && os.Args[1] == "append":
		for _, p := range os.Args[2:] {
			appendParts(p)
		}
	case len(os.Args) == 4 && os.Args[1] == "repl":
		replTimeline(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "e2e":
		tailEndToEnd(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "blocks":
		d, err := time.ParseDuration(os.Args[3])
		if err != nil {
			fail(err)
		}
		blockedFor(os.Args[2], d)
	default:
		fmt.Fprintln(os.Stderr, "usage: traces read NODE.trace [CLIENT.trace] | traces kafka NODE.trace [CLIENT.trace] | traces tail NODE.trace | traces append NODE.trace... | traces e2e NODE.trace CLIENT.trace | traces repl OWNER.trace FOLLOWER.trace | traces blocks X.trace MIN")
		os.Exit(2)
	}
}

// inside says whether any frame of s is in a function whose name contains
// one of fns.
func inside(s trace.Stack, fns ...string) bool {
	for f := range s.Frames() {
		for _, fn := range fns {
			if strings.Contains(f.Func, fn) {
				return true
			}
		}
	}
	return false
}

// goroutineEvents calls each for every goroutine state transition in the
// trace at path, in order.
func goroutineEvents(path string, each func(trace.Event)) {
	events(path, func(e trace.Event) {
		if e.Kind() == trace.EventStateTransition && e.StateTransition().Resource.Kind == trace.ResourceGoroutine {
			each(e)
		}
	})
}

// events calls each for every event in the trace at path, in order.
func events(path string, each func(trace.Event)) {
	f, err := os.Open(path)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			return
		}
		if err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		each(e)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "traces:", err)
	os.Exit(1)
}
