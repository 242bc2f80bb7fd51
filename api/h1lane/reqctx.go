package h1lane

import (
	"context"
	"sync"
	"time"
)

// reqContext is the context of a request the lane serves: done when the
// handler returns or the connection's context ends, as net/http's is.
//
// Why not context.WithCancel per request: that allocates the context
// and its cancel function and registers the request with the
// connection's context (a map insert, and a delete at the end), about
// 10 µs when it runs cold, as a live tail's appends do at 200/s; yet a
// simple request's handler rarely asks for Done. So the cancellable
// context is made only when asked for (Done, or a Value after the end,
// which is how the context package finds a parent to cancel with),
// and a request that never asks costs one allocation.
type reqContext struct {
	conn context.Context // the connection's: its values, and its end ends the request

	mu     sync.Mutex
	ended  bool               // the handler returned
	inner  context.Context    // context.WithCancel(conn), once asked for
	cancel context.CancelFunc // inner's
}

// innerLocked makes the cancellable context if need be. mu held.
func (c *reqContext) innerLocked() context.Context {
	if c.inner == nil {
		c.inner, c.cancel = context.WithCancel(c.conn)
		if c.ended {
			c.cancel()
		}
	}
	return c.inner
}

func (c *reqContext) Deadline() (time.Time, bool) { return c.conn.Deadline() }

func (c *reqContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.innerLocked().Done()
}

func (c *reqContext) Err() error {
	c.mu.Lock()
	inner, ended := c.inner, c.ended
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.conn.Err(); err != nil {
		return err
	}
	if ended {
		return context.Canceled
	}
	return nil
}

// Value is the connection context's value, or the inner context's once
// it exists, so context.Cause and the children of this context (the
// context package finds their parent through Value after a Done) see
// the request's own cancellation. After the end it makes the inner
// context (cancelled), so Cause agrees with Err.
func (c *reqContext) Value(key any) any {
	c.mu.Lock()
	ctx := c.inner
	if ctx == nil && c.ended {
		ctx = c.innerLocked()
	}
	c.mu.Unlock()
	if ctx == nil {
		ctx = c.conn
	}
	return ctx.Value(key)
}

func (c *reqContext) String() string { return "h1lane request context" }

// end cancels the context: the handler has returned.
func (c *reqContext) end() {
	c.mu.Lock()
	c.ended = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
