package node

import (
	"context"
	"log/slog"
	"sync"
)

// jobs supervises the node's background loops: the stream service's jobs
// (stream.Service.Jobs: flusher, object garbage collector, compactor,
// expiry reaper, retention) and the membership keeper. Every job has one
// shape, Run(ctx) error: it works until ctx is cancelled and then returns.
// stop cancels them all and waits until each has returned, so nothing
// runs on when the WAL and etcd are closed after it.
type jobs struct {
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newJobs(log *slog.Logger) *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{log: log, ctx: ctx, cancel: cancel}
}

// start runs one job in its own goroutine. A job that fails before it is
// stopped is logged: the node keeps serving, without it.
func (j *jobs) start(name string, run func(context.Context) error) {
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		if err := run(j.ctx); err != nil && j.ctx.Err() == nil {
			j.log.Error("background job stopped", "job", name, "err", err)
		}
	}()
}

// stop cancels every job and waits for all of them (the flusher's last
// flush included).
func (j *jobs) stop() {
	j.cancel()
	j.wg.Wait()
}
