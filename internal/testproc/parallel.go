package testproc

import (
	"sync"
	"sync/atomic"
)

// Parallel calls fn(i) for every i in [0, n) from c goroutines, each taking
// the next i when it is done with one, and returns the first error; after
// an error no new i is started. Load tests use it to drive a server with c
// concurrent closed-loop clients.
func Parallel(n, c int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	for range c {
		wg.Go(func() {
			for firstErr.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return *e
	}
	return nil
}
