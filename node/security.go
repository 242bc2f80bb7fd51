package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// bearer extracts the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// guard authenticates and authorises every request when a token file is
// configured, and applies the token's rate limit.
type guard struct {
	checker auth.Checker
	routes  *routeTable
	denied  *prometheus.CounterVec
}

func newGuard(checker auth.Checker, routes *routeTable, reg prometheus.Registerer) *guard {
	g := &guard{checker: checker, routes: routes, denied: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "picomq_auth_denied_total",
		Help: "HTTP requests refused by authentication (401), authorisation (403) or a token rate limit (429).",
	}, []string{"code"})}
	reg.MustRegister(g.denied)
	return g
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := g.routes.classify(r)
		if need.public {
			next.ServeHTTP(w, r)
			return
		}
		p, err := g.checker.Authenticate(bearer(r))
		if err != nil {
			g.denied.WithLabelValues("401").Inc()
			drainH2Body(r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="picomq"`)
			msg := "a bearer token is required (Authorization: Bearer …)"
			if errors.Is(err, auth.ErrInvalidToken) {
				msg = "the bearer token is not valid"
			}
			httpx.WriteError(w, http.StatusUnauthorized, wire.CodeUnauthorized, msg)
			return
		}
		if !need.metrics && p.ScrapeOnly() {
			g.denied.WithLabelValues("403").Inc()
			drainH2Body(r)
			httpx.WriteError(w, http.StatusForbidden, wire.CodeForbidden,
				fmt.Sprintf("token %q is scrape-only (scope %q): it may only GET /metrics", p.Name, auth.ScopeMetrics))
			return
		}
		if need.level != 0 && !p.Allows(need.level, need.name) {
			g.denied.WithLabelValues("403").Inc()
			drainH2Body(r)
			httpx.WriteError(w, http.StatusForbidden, wire.CodeForbidden,
				fmt.Sprintf("token %q has no %s scope covering %q", p.Name, need.level, need.name))
			return
		}
		if ok, wait := p.Take(time.Now()); !ok {
			g.denied.WithLabelValues("429").Inc()
			drainH2Body(r)
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			httpx.WriteError(w, http.StatusTooManyRequests, wire.CodeRateLimited,
				fmt.Sprintf("token %q is over its request rate; retry after %s", p.Name, wait.Round(time.Millisecond)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxRefusedBodyDrain is how much of a refused HTTP/2 request's body is
// read before the answer: net/http's own figure for HTTP/1.1.
const maxRefusedBodyDrain = 256 << 10

// drainH2Body reads (under the body deadline, connBounds.bodyDeadline) up
// to maxRefusedBodyDrain of the body of an HTTP/2 request that is refused
// before it is read. Without it the answer is followed at once by
// RST_STREAM(NO_ERROR) while the client is still sending, which RFC 9113
// allows but which some clients (curl) report as a stream error instead
// of the 401; HTTP/1.1 bodies net/http and the lane drain themselves.
func drainH2Body(r *http.Request) {
	if r.ProtoMajor == 2 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxRefusedBodyDrain))
	}
}

// appendBudget bounds the memory held by request bodies being received
// (their deadline is the body stage's, connBounds.bodyDeadline). A body's weight is its
// Content-Length, or the largest allowed body when it is chunked, so the
// sum of weights bounds what the handlers can have read into memory.
// When the budget is spent a request waits (back-pressure: its body stays
// in the kernel and in the client); after maxWait it gets 503 +
// Retry-After instead of an unbounded queue.
type appendBudget struct {
	total, maxBody int64
	maxWait        time.Duration

	mu   sync.Mutex
	used int64
	// freed is closed when bytes are released; nil while nobody waits,
	// so an append that fits costs no timer and no channel.
	freed chan struct{}
}

func newAppendBudget(total, maxBody int64) *appendBudget {
	return &appendBudget{total: total, maxBody: maxBody, maxWait: 5 * time.Second}
}

// take reserves n bytes if they fit; otherwise it returns the channel
// closed at the next release.
func (b *appendBudget) take(n int64) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n <= b.total {
		b.used += n
		return true, nil
	}
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	return false, b.freed
}

func (b *appendBudget) acquire(ctx context.Context, n int64) bool {
	ok, freed := b.take(n)
	if ok {
		return true
	}
	timer := time.NewTimer(b.maxWait)
	defer timer.Stop()
	for {
		select {
		case <-freed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
		if ok, freed = b.take(n); ok {
			return true
		}
	}
}

func (b *appendBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

func (b *appendBudget) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
			next.ServeHTTP(w, r)
			return
		}
		n := b.maxBody
		if r.ContentLength >= 0 && r.ContentLength < n {
			n = r.ContentLength
		}
		if n == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if !b.acquire(r.Context(), n) {
			httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeOverloaded,
				"too many append bytes in flight on this node; retry shortly")
			return
		}
		defer b.release(n)
		next.ServeHTTP(w, r)
	})
}

// setReadDeadline is http.ResponseController's SetReadDeadline without a
// controller allocated per request: the first writer down the Unwrap
// chain that can set it does.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	for {
		switch x := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			_ = x.SetReadDeadline(t)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// limitListener closes connections beyond max at once, so a flood of idle
// connections costs one accept each and cannot grow memory past the
// limit; connections already open keep being served. It also remembers
// when Accept last failed (out of file descriptors, say) for /readyz; the
// accept loops above it retry (internal/netx).
type limitListener struct {
	net.Listener
	slots   chan struct{}
	refused prometheus.Counter
	errs    prometheus.Counter

	failedAt  atomic.Int64 // unix nanoseconds of the last failed Accept; 0 after a success
	failedErr atomic.Pointer[string]
}

func newLimitListener(ln net.Listener, max int, refused, errs prometheus.Counter) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), refused: refused, errs: errs}
}

// acceptFailingWindow is how recent a failed Accept must be for the
// listener to count as down: the accept loops retry at least every second
// (internal/netx.Backoff), so a listener that keeps failing stays in it.
const acceptFailingWindow = 2 * time.Second

// acceptErr is the last Accept error if the listener is failing now.
func (l *limitListener) acceptErr() error {
	at := l.failedAt.Load()
	if at == 0 || time.Since(time.Unix(0, at)) > acceptFailingWindow {
		return nil
	}
	if msg := l.failedErr.Load(); msg != nil {
		return errors.New(*msg)
	}
	return errors.New("accept failing")
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.errs.Inc()
				msg := err.Error()
				l.failedErr.Store(&msg)
				l.failedAt.Store(time.Now().UnixNano())
			}
			return nil, err
		}
		if l.failedAt.Load() != 0 {
			l.failedAt.Store(0)
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			l.refused.Inc()
			_ = c.Close()
		}
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// certReloader serves the certificate in force and swaps in a new one on
// Reload, so a renewed certificate is picked up without a restart;
// handshakes in progress keep the old one.
type certReloader struct {
	certFile, keyFile string
	flags             string // the flags that name the pair, for errors
	cur               atomic.Pointer[tls.Certificate]
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, flags: "--tls-cert/--tls-key"}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the pair again; on error the old certificate stays.
func (c *certReloader) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%s: %w", c.flags, err)
	}
	c.cur.Store(&cert)
	return nil
}

// notAfter is the expiry of the certificate in force (its leaf, which
// tls.LoadX509KeyPair parses).
func (c *certReloader) notAfter() time.Time {
	if cert := c.cur.Load(); cert != nil && cert.Leaf != nil {
		return cert.Leaf.NotAfter
	}
	return time.Time{}
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }

// serverTLS is the listeners' TLS configuration: TLS 1.2+, HTTP/2 first.
func (c *certReloader) serverTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get, NextProtos: []string{"h2", "http/1.1"}}
}

// loadCAPool reads a PEM bundle for verifying a server.
func loadCAPool(flag, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %s: no PEM certificates in it", flag, file)
	}
	return pool, nil
}

// etcdTLS is the client TLS configuration for external etcd, or nil when
// none of --etcd-ca/--etcd-cert is set (plain, or https with the system
// roots when an endpoint says https://).
func etcdTLS(cfg Config) (*tls.Config, *certReloader, error) {
	https := false
	for _, e := range cfg.EtcdEndpoints {
		https = https || strings.HasPrefix(e, "https://")
	}
	if cfg.EtcdCA == "" && cfg.EtcdCert == "" && !https {
		return nil, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.EtcdCA != "" {
		pool, err := loadCAPool("--etcd-ca", cfg.EtcdCA)
		if err != nil {
			return nil, nil, err
		}
		tc.RootCAs = pool
	}
	var certs *certReloader
	if cfg.EtcdCert != "" {
		// Reloaded on SIGHUP like the listener's: a renewed client
		// certificate is used from the next connection to etcd on.
		certs = &certReloader{certFile: cfg.EtcdCert, keyFile: cfg.EtcdKey, flags: "--etcd-cert/--etcd-key"}
		if err := certs.Reload(); err != nil {
			return nil, nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return certs.cur.Load(), nil }
	}
	return tc, certs, nil
}

// Reload re-reads the token file and the TLS certificate (SIGHUP). Each
// keeps its old contents when the new ones do not load; the error says
// which failed.
func (n *Node) Reload() error {
	var errs []error
	if n.tokens != nil {
		if err := n.tokens.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("token file reloaded", "file", n.tokens.Path(), "tokens", n.tokens.Len())
		}
	}
	for _, c := range []*certReloader{n.certs, n.etcdCerts} {
		if c == nil {
			continue
		}
		if err := c.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("TLS certificate reloaded", "cert", c.certFile)
		}
	}
	return errors.Join(errs...)
}

// logSecurity says at start-up how the listener is protected.
func logSecurity(log *slog.Logger, cfg Config, h2c bool) {
	authMode := "off (loopback only)"
	switch {
	case cfg.AuthTokens != "":
		authMode = "tokens from " + cfg.AuthTokens
	case cfg.InsecureNoAuth:
		authMode = "off (--insecure-no-auth)"
		log.Warn("authentication is off on a listener other hosts may reach (--insecure-no-auth)")
	}
	log.Info("listener security", "auth", authMode, "tls", cfg.TLSCert != "", "h2c", h2c)
}
