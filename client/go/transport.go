package picomq

import (
	"net/http"

	"github.com/PicoMQ/picomq/client/go/internal/h1"
)

// WithStdTransport sends every request through net/http's Transport
// instead of the SDK's lean HTTP/1.1 transport (see "Transport" in the
// package documentation). Use it to rule the lean transport out when
// debugging, or to get net/http behaviour — HTTP/2, transparent gzip,
// its connection handling — for every call. WithHTTPClient implies it.
func WithStdTransport() Option {
	return func(c *config) { c.stdTransport = true }
}

// leanMethods are the calls that go through the lean transport: the
// writes and HEAD, whose bodies are small and in memory. Reads (GET:
// pages, long-polls, server-sent events) stay on net/http.
func leanMethod(m string) bool {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead:
		return true
	}
	return false
}

// routingTransport sends the SDK's own writes and HEADs over cleartext
// HTTP/1.1 through the lean transport and everything else through
// net/http's. A request goes the lean way only when its URL is http (https
// keeps net/http's TLS and HTTP/2), no proxy applies to it (std.Proxy, the
// environment's proxy settings, says none) and h1.Supports accepts it (an
// in-memory body or none, no Expect or Upgrade).
type routingTransport struct {
	std  *http.Transport
	lean *h1.Transport
}

func newRoutingTransport(std *http.Transport) *routingTransport {
	return &routingTransport{std: std, lean: &h1.Transport{
		MaxIdlePerHost: std.MaxIdleConnsPerHost,
		IdleTimeout:    std.IdleConnTimeout,
		DialContext:    std.DialContext,
	}}
}

func (t *routingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.useLean(req) {
		return t.lean.RoundTrip(req)
	}
	return t.std.RoundTrip(req)
}

func (t *routingTransport) useLean(req *http.Request) bool {
	if !leanMethod(req.Method) || !h1.Supports(req) {
		return false
	}
	if t.std.Proxy != nil {
		if p, err := t.std.Proxy(req); err != nil || p != nil {
			return false
		}
	}
	return true
}

// CloseIdleConnections closes both transports' idle connections (Client.Close).
func (t *routingTransport) CloseIdleConnections() {
	t.std.CloseIdleConnections()
	t.lean.CloseIdleConnections()
}
