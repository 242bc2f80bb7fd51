// Package metatest starts real etcd servers for other packages' tests.
//
// Each call starts its own embedded etcd on free loopback ports with fast
// raft timing and a fresh temporary data dir, so tests are isolated from one
// another and can run in parallel. Set PICOMQ_ETCD_DEBUG=1 to see etcd's own
// logs on stderr.
package metatest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/embedded"
)

// startTimeout bounds server start plus dial; generous because CI machines
// share cores with parallel builds.
const startTimeout = time.Minute

// StartEtcd starts an embedded etcd for t and returns a client connected to
// it. The client and the server are closed when t finishes.
func StartEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	_, cli := start(t)
	return cli
}

// StartEmbedded is StartEtcd that also returns the server, for tests that
// need its endpoints (a second client, a node under test dialling by URL)
// or that close it early to simulate etcd going away. Closing it early is
// safe; the cleanup's Close is then a no-op.
func StartEmbedded(t testing.TB) (*embedded.Server, *clientv3.Client) {
	t.Helper()
	return start(t)
}

func start(t testing.TB) (*embedded.Server, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// TempDir is registered before the Close cleanups below, so it is
	// removed only after etcd has let go of it.
	dir := t.TempDir()
	e, err := embedded.Start(ctx, embedded.Config{Dir: dir, Fast: true, Logger: debugLogger()})
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("metatest: close etcd: %v", err)
		}
	})
	cli, err := meta.Dial(ctx, e.Endpoints())
	if err != nil {
		t.Fatalf("metatest: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return e, cli
}

// debugLogger routes etcd's logs to stderr when PICOMQ_ETCD_DEBUG is set.
// It deliberately does not use t.Log: etcd goroutines may log after the test
// has returned, which testing treats as a panic.
func debugLogger() *slog.Logger {
	if os.Getenv("PICOMQ_ETCD_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
