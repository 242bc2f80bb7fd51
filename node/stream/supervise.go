package stream

import (
	"context"
	"sync"
)

// supervisor owns the goroutines the service starts by itself, outside
// the node's jobs (Service.Jobs): the reservation writer, the publishers
// of appends whose appender gave up waiting, and the delayed deletion of
// compacted objects. Close stops it: their context ends and Close returns
// only after every one of them has, so none outlives the service and
// touches the WAL or etcd after the node closed them.
type supervisor struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newSupervisor() *supervisor {
	ctx, cancel := context.WithCancel(context.Background())
	return &supervisor{ctx: ctx, cancel: cancel}
}

// Go runs fn in a goroutine with the supervisor's context, unless the
// supervisor was stopped: then fn does not run and Go reports false.
func (g *supervisor) Go(fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn(g.ctx)
	}()
	return true
}

// stop ends the supervisor's context and waits for every goroutine it
// started. Later calls of Go start nothing.
func (g *supervisor) stop() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}
