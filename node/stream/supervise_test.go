package stream

import (
	"context"
	"testing"
	"time"
)

// TestSupervisorStopWaits: stop ends the goroutines' context and returns
// only after each returned; Go after stop starts nothing.
func TestSupervisorStopWaits(t *testing.T) {
	g := newSupervisor()
	started, returned := make(chan struct{}), make(chan struct{})
	if !g.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // work after cancellation that stop must wait for
		close(returned)
	}) {
		t.Fatal("Go on a running supervisor started nothing")
	}
	<-started
	g.stop()
	select {
	case <-returned:
	default:
		t.Fatal("stop returned before the goroutine did")
	}
	if g.Go(func(context.Context) { t.Error("ran after stop") }) {
		t.Error("Go after stop reported a start")
	}
	g.stop() // idempotent
}
