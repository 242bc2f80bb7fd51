// Package streamtest runs a real stream service (a real WAL in a temporary
// directory and a real embedded etcd) for the tests of other packages, so
// frontends are tested against the service they will run on rather than a
// fake that could drift from it. Frontends may import this package from
// their tests; it is the only way they reach storage, and only in tests.
package streamtest

import (
	"context"
	"io"
	"log/slog"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/wal"
)

// quiet discards logs: tests report through t, and the service's info logs
// would bury the failures.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Env is one service and what it runs on.
type Env struct {
	t   testing.TB
	cfg stream.Config
	dir string
	cli *clientv3.Client
	wal *wal.WAL
	// Svc is the running service; Restart replaces it.
	Svc *stream.Service
}

// New starts a service with cfg (NodeID defaults to "test"). Everything is
// closed when t ends.
func New(t testing.TB, cfg stream.Config) *Env {
	t.Helper()
	if cfg.NodeID == "" {
		cfg.NodeID = "test"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	e := &Env{t: t, cfg: cfg, dir: t.TempDir(), cli: metatest.StartEtcd(t)}
	e.open()
	t.Cleanup(func() {
		e.Svc.Close()
		_ = e.wal.Close()
	})
	return e
}

func (e *Env) open() {
	e.t.Helper()
	w, _, err := wal.Open(wal.Options{Dir: e.dir, Logger: e.cfg.Logger})
	if err != nil {
		e.t.Fatalf("streamtest: open WAL: %v", err)
	}
	svc, err := stream.Open(context.Background(), e.cfg, w, meta.NewRegistry(e.cli, "/streamtest/"))
	if err != nil {
		_ = w.Close()
		e.t.Fatalf("streamtest: open service: %v", err)
	}
	e.wal, e.Svc = w, svc
}

// Restart closes the service and the WAL cleanly and opens both again on
// the same directory and registry, as a node restart does: whatever the
// service recovers is what a real node would.
func (e *Env) Restart() {
	e.t.Helper()
	e.Svc.Close()
	if err := e.wal.Close(); err != nil {
		e.t.Fatalf("streamtest: close WAL: %v", err)
	}
	e.open()
}
