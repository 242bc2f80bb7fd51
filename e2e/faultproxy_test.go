package e2e

import (
	"testing"

	"github.com/PicoMQ/picomq/internal/faultproxy"
)

// faultProxy is the fault-injecting HTTP proxy (internal/faultproxy) the
// soak puts between the nodes and MinIO, so object storage can fail on
// command without restarting MinIO: every node's --object-store points at
// the proxy. proxyDown drops every request's connection without an
// answer, as a stopped or unreachable MinIO does; proxySlow holds every
// request for the configured delay before forwarding it, as an overloaded
// one does; proxy500 answers every request 500 with an S3 InternalError
// body, as a failing one does.
type faultProxy = faultproxy.Proxy

const (
	proxyPass = faultproxy.Pass
	proxyDown = faultproxy.Down
	proxySlow = faultproxy.Slow
	proxy500  = faultproxy.Error
)

// startFaultProxy starts a proxy to target (an http:// URL) on a loopback
// port, stopped when the test ends.
func startFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
