package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// defaultStartRetry bounds how long start-up waits for a dependency when
// --start-retry is not set.
const defaultStartRetry = 10 * time.Minute

// startAttemptTimeout bounds one attempt to reach the object store, so a
// black-holed endpoint (a NAT route not there yet) costs one attempt, not
// the whole start.
const startAttemptTimeout = 30 * time.Second

// bootServer answers /healthz and /readyz on the stream listener while
// start-up waits for the object store or etcd, so that a load balancer and
// an operator see why the node is not ready (on a first boot, IAM and the
// network can take minutes). Every other request gets a retryable 503. It
// stops before the real server takes the same listener.
type bootServer struct {
	srv     *http.Server
	served  chan struct{}
	ln      net.Listener
	waiting atomic.Pointer[string] // what start-up waits for, "" when nothing
}

// pausingListener is the stream listener lent to the boot server: closing
// it only unblocks Accept (by a deadline in the past), so the socket stays
// bound and no connection attempt is refused between the two servers.
type pausingListener struct{ net.Listener }

type deadliner interface{ SetDeadline(time.Time) error }

func (l pausingListener) Close() error {
	if d, ok := l.Listener.(deadliner); ok {
		return d.SetDeadline(time.Unix(1, 0))
	}
	return nil
}

// startBootServer begins answering on n.ln until stopBootServer.
func (n *Node) startBootServer() {
	d, ok := n.ln.(deadliner)
	if !ok {
		return // not a TCP listener (never in practice): no answers until ready
	}
	b := &bootServer{served: make(chan struct{}), ln: n.ln}
	b.setWaiting("starting")
	b.srv = &http.Server{
		Handler:           http.HandlerFunc(b.serve),
		TLSConfig:         n.tlsCfg,
		ReadHeaderTimeout: n.cfg.ReadHeaderTimeout,
		// It reads no bodies: one left unread is drained under this
		// bound (node/edge.go, the body stage), never held open.
		ReadTimeout: n.cfg.ReadHeaderTimeout + n.cfg.connBounds().body,
		IdleTimeout: 5 * time.Second,
	}
	ln := pausingListener{n.ln}
	go func() {
		defer close(b.served)
		if n.tlsCfg != nil {
			_ = b.srv.ServeTLS(ln, "", "")
		} else {
			_ = b.srv.Serve(ln)
		}
		_ = d.SetDeadline(time.Time{}) // the real server accepts from here on
	}()
	n.boot = b
	n.onClose("start-up responder", func(ctx context.Context) error { n.stopBootServer(ctx); return nil })
}

// stopBootServer hands the listener back: in-flight boot answers finish,
// then Accept is released and its deadline cleared.
func (n *Node) stopBootServer(ctx context.Context) {
	b := n.boot
	if b == nil {
		return
	}
	n.boot = nil
	if err := b.srv.Shutdown(ctx); err != nil {
		_ = b.srv.Close()
	}
	<-b.served
}

func (b *bootServer) setWaiting(what string) { b.waiting.Store(&what) }

func (b *bootServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close") // the next connection meets the real server
	msg := "node starting"
	if r.URL.Path == "/readyz" {
		msg = "starting: " + *b.waiting.Load()
	}
	httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeServiceUnavailable, msg)
}

// untilAvailable runs op until it succeeds, retrying with exponential
// backoff (0.5 s growing to 15 s, jittered) for up to --start-retry while
// retryable says the failure may pass: an object store or etcd that is
// unreachable, denied or missing at boot is usually a network, an IAM
// policy or a peer that is not there yet. Each failure is logged and shown
// on /readyz. A failure that is not retryable, the end of --start-retry or
// ctx (SIGTERM) ends the start with the last error.
func (n *Node) untilAvailable(ctx context.Context, what string, retryable func(error) bool, op func(context.Context) error) error {
	limit := n.cfg.StartRetry
	if limit <= 0 {
		limit = defaultStartRetry
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 15 * time.Second
	attempt := 0
	var last error
	if n.boot != nil {
		// /readyz names the dependency from the first attempt on, not
		// only after it failed (an etcd dial can take seconds to fail).
		n.boot.setWaiting(what + " (attempt 1)")
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		last = op(ctx)
		if last != nil && !retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(limit), backoff.WithNotify(func(err error, next time.Duration) {
		if n.boot != nil {
			n.boot.setWaiting(what + " (attempt " + strconv.Itoa(attempt) + "): " + oneLine(err.Error()))
		}
		n.log.Warn("start-up is waiting for a dependency; retrying", "waiting_for", what, "attempt", attempt,
			"retry_in", next.Round(time.Millisecond), "err", err)
	}))
	if err == nil {
		if attempt > 1 {
			n.log.Info("dependency available", "waiting_for", what, "attempts", attempt)
		}
		if n.boot != nil {
			n.boot.setWaiting("starting")
		}
		return nil
	}
	if last != nil && !errors.Is(err, last) {
		// Interrupted (SIGTERM): say what it was waiting for.
		return errors.Join(err, last)
	}
	return err
}
