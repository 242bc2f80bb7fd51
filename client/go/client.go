package picomq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/sdk/hugepage"
	"github.com/PicoMQ/picomq/sdk/retry"
)

// Version is the SDK's version, sent in the User-Agent header.
const Version = "0.1.0"

// Option configures a Client.
type Option func(*config)

type config struct {
	token        string
	hc           *http.Client
	retry        RetryPolicy
	userAgent    string
	maxRedirects int
	stdTransport bool
}

// WithToken sends "Authorization: Bearer token" on every request, and on
// every hop of a redirect to another node.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithHTTPClient makes the client send its requests through hc (its
// Transport, Jar, Timeout): all of them, the lean transport is not used.
// The SDK follows redirects itself, so hc's
// CheckRedirect is not used. Do not set hc.Timeout if you use long-polls or
// subscriptions; use contexts instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.hc = hc }
}

// WithRetryPolicy sets how read-shaped operations (reads, HEAD, list,
// describe) are retried on network errors and on 429/502/503/504. Appends,
// creates and deletes are never retried; a Producer retries its batches
// safely under its own sequence numbers, with this policy's backoff.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *config) { c.retry = p }
}

// WithUserAgent replaces the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *config) { c.userAgent = ua }
}

// WithMaxRedirects bounds the redirects followed for one request (default
// 5; 0 disables following, so a 307 is returned as an error).
func WithMaxRedirects(n int) Option {
	return func(c *config) { c.maxRedirects = n }
}

// RetryPolicy says how often and how patiently to retry.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too: 1 means no retries.
	MaxAttempts int
	// InitialBackoff is the delay before the first retry; each further
	// retry doubles it up to MaxBackoff. Delays are jittered (half to all
	// of the nominal delay; the rule of package sdk/retry). A server's Retry-After is honoured up to
	// MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// DefaultRetryPolicy is used when no WithRetryPolicy is given.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}

// NoRetry disables retries of read-shaped operations.
var NoRetry = RetryPolicy{MaxAttempts: 1}

func (p RetryPolicy) normalized() RetryPolicy {
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultRetryPolicy.InitialBackoff
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = max(p.InitialBackoff, DefaultRetryPolicy.MaxBackoff)
	}
	return p
}

// delay is the wait before retry number attempt (1 = the first retry):
// the repository's one backoff rule (sdk/retry), then at least the
// server's Retry-After up to MaxBackoff.
func (p RetryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := retry.Policy{Initial: p.InitialBackoff, Max: p.MaxBackoff}.Delay(attempt)
	if ra := min(retryAfter, p.MaxBackoff); ra > d {
		d = ra
	}
	return d
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }

// client implements Client for both protocols.
type client struct {
	proto  Protocol
	base   *url.URL // scheme, host and path prefix ("" for Pico, "/v1/stream" for DS)
	prefix string   // base.Path without a trailing slash
	origin string   // scheme://host of base
	token  string
	hc     *http.Client
	// rt is the routing transport of an http.Client the SDK built itself
	// (no WithHTTPClient, no WithStdTransport), nil otherwise: requests it
	// sends the lean way skip http.Client.Do (see send).
	rt           *routingTransport
	retry        RetryPolicy
	userAgent    string
	maxRedirects int
	// pageBufs are the free page buffers of the client's Records
	// iterators with ReuseBuffers: a later catch-up starts in the memory
	// an earlier one left, not in fresh memory.
	pageBufs pageBuffers
}

// NewPico returns a client for the Pico protocol at baseURL, a node's URL
// such as "http://127.0.0.1:4437". It does no network I/O.
func NewPico(baseURL string, opts ...Option) (Client, error) {
	return newClient(ProtocolPico, baseURL, opts)
}

// NewDurableStreams returns a client for the Durable Streams protocol.
// baseURL is a node's URL ("http://127.0.0.1:4437"), under which PicoMQ
// serves streams at /v1/stream/; a URL with a path is taken as the stream
// root itself (for other servers or proxies). It does no network I/O.
func NewDurableStreams(baseURL string, opts ...Option) (Client, error) {
	return newClient(ProtocolDurableStreams, baseURL, opts)
}

// New returns a client for protocol p; see NewPico and NewDurableStreams.
func New(p Protocol, baseURL string, opts ...Option) (Client, error) {
	if p != ProtocolPico && p != ProtocolDurableStreams {
		return nil, fmt.Errorf("picomq: unknown protocol %d", p)
	}
	return newClient(p, baseURL, opts)
}

// ParseProtocol parses "pico" or "durable-streams" (also "ds").
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pico", "":
		return ProtocolPico, nil
	case "durable-streams", "ds":
		return ProtocolDurableStreams, nil
	}
	return 0, fmt.Errorf("picomq: protocol %q: want pico or durable-streams", s)
}

func newClient(p Protocol, baseURL string, opts []Option) (*client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("picomq: base URL %q: %v", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("picomq: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("picomq: base URL %q: no query, fragment or user info allowed", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if p == ProtocolDurableStreams && u.Path == "" {
		u.Path = "/v1/stream"
	}
	cfg := config{retry: DefaultRetryPolicy, userAgent: "picomq-go/" + Version, maxRedirects: 5}
	for _, o := range opts {
		o(&cfg)
	}
	if strings.ContainsAny(cfg.token, "\r\n") {
		return nil, errors.New("picomq: token contains a line break")
	}
	hc := cfg.hc
	var rt *routingTransport
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		hc = &http.Client{Transport: tr}
		if !cfg.stdTransport {
			rt = newRoutingTransport(tr)
			hc.Transport = rt
		}
	}
	// Redirects are followed by the SDK (see do): never by net/http, which
	// drops Authorization on cross-host hops.
	own := *hc
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{
		proto:        p,
		base:         u,
		prefix:       u.Path,
		origin:       u.Scheme + "://" + u.Host,
		token:        cfg.token,
		hc:           &own,
		rt:           rt,
		retry:        cfg.retry.normalized(),
		userAgent:    cfg.userAgent,
		maxRedirects: max(cfg.maxRedirects, 0),
	}, nil
}

func (c *client) Protocol() Protocol { return c.proto }

func (c *client) Beginning() string {
	if c.proto == ProtocolDurableStreams {
		return "-1"
	}
	return "0"
}

func (c *client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

func (c *client) Stream(name string) Stream {
	return &stream{c: c, name: name}
}

// dsOffsetDigits is the width of each half of PicoMQ's Durable Streams
// offsets, "<generation>_<record offset>", both zero-padded.
const dsOffsetDigits = 16

func (c *client) PositionAt(offset int64) string {
	if c.proto == ProtocolDurableStreams {
		return fmt.Sprintf("%0*d_%0*d", dsOffsetDigits, 0, dsOffsetDigits, offset)
	}
	return strconv.FormatInt(offset, 10)
}

func (c *client) OffsetOf(position string) (int64, error) {
	if c.proto == ProtocolDurableStreams {
		if n, ok := dsRecordOffset(position); ok {
			return n, nil
		}
		return 0, fmt.Errorf("picomq: position %q is not a PicoMQ Durable Streams offset", position)
	}
	n, err := strconv.ParseInt(position, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("picomq: position %q is not a Pico offset", position)
	}
	return n, nil
}

// dsRecordOffset parses PicoMQ's "<generation>_<record offset>" form
// (generation 0).
func dsRecordOffset(pos string) (int64, bool) {
	gen, off, ok := strings.Cut(pos, "_")
	if !ok || gen == "" || off == "" || len(gen) > dsOffsetDigits || len(off) > dsOffsetDigits {
		return 0, false
	}
	for _, s := range []string{gen, off} {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
		}
	}
	g, _ := strconv.ParseInt(gen, 10, 64)
	n, err := strconv.ParseInt(off, 10, 64)
	if g != 0 || err != nil {
		return 0, false
	}
	return n, true
}

// call is one logical request. Its body is kept in memory so that it can be
// sent again on a redirect or a retry.
type call struct {
	method string
	path   string // under the client's prefix, unescaped ("/orders/1"); may be empty
	query  url.Values
	header http.Header
	body   []byte
	// retry marks read-shaped requests, which the retry policy may repeat.
	retry bool
	// message allows the call to be rendered by sendMessage (appends)
	// when its target allows it: see leanTarget.
	message bool
	// owner is the stream's remembered owner node, if any: requests go
	// there directly after a redirect taught the SDK where the stream
	// lives.
	owner *ownerCache
}

// ownerCache remembers the base URL a stream's requests were last
// redirected to, so that steady traffic (a producer, a follower) does not
// pay a redirect per request.
type ownerCache struct {
	mu  sync.Mutex
	url string // scheme://host[/path] of the owner, no trailing slash

	// last is the most recent first-hop target of the stream's requests,
	// parsed: a producer sends every append to the same URL, and parsing
	// it again for each one cost measurable CPU (see newRequest).
	last atomic.Pointer[parsedTarget]
}

// parsedTarget is a target URL string and its parse, as
// http.NewRequest leaves it. The *url.URL is shared by the requests built
// from it and must not be modified (net/http and the lean transport only
// read a request's URL).
type parsedTarget struct {
	target string
	u      *url.URL
	lean   *leanTarget // nil: not for sendMessage
}

// cachedURL returns target's parse if it is the cached one.
func (o *ownerCache) cachedURL(target string) *url.URL {
	if o == nil {
		return nil
	}
	if p := o.last.Load(); p != nil && p.target == target {
		return p.u
	}
	return nil
}

func (o *ownerCache) cacheURL(target string, u *url.URL, lean *leanTarget) {
	if o != nil {
		o.last.Store(&parsedTarget{target: target, u: u, lean: lean})
	}
}

// cachedLean returns target's leanTarget if it is the cached target and
// has one.
func (o *ownerCache) cachedLean(target string) *leanTarget {
	if o == nil {
		return nil
	}
	if p := o.last.Load(); p != nil && p.target == target {
		return p.lean
	}
	return nil
}

func (o *ownerCache) get() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.url
}

func (o *ownerCache) set(u string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.url = u
	o.mu.Unlock()
}

// requestURI is the path and query of cl under the prefix.
func (c *client) requestURI(cl *call) string {
	u := url.URL{Path: c.prefix + cl.path}
	s := u.EscapedPath()
	if s == "" {
		s = "/"
	}
	if len(cl.query) > 0 {
		s += "?" + cl.query.Encode()
	}
	return s
}

// do sends cl: following redirects (re-sending method, body and token to
// every hop) and, for read-shaped calls, retrying per the retry policy. It
// returns a response with a 2xx or 304 status; any other status becomes a
// *ClientError. The caller closes the body.
func (c *client) do(ctx context.Context, cl *call) (*http.Response, error) {
	attempts := 1
	if cl.retry {
		attempts = c.retry.MaxAttempts
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.doOnce(ctx, cl)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctxError(ctx, err)
		}
		retryable, after := retryableError(err)
		if !retryable || attempt >= attempts {
			return nil, err
		}
		if err := sleepCtx(ctx, c.retry.delay(attempt, after)); err != nil {
			return nil, err
		}
	}
}

// ctxError returns the context's error, keeping the underlying network
// error for the message.
func ctxError(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}

// retryableError reports whether a failed request may be retried (when it
// is safe to): network failures and overload or availability statuses.
func retryableError(err error) (bool, time.Duration) {
	var ce *ClientError
	if errors.As(err, &ce) {
		switch ce.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true, ce.RetryAfter
		}
		return false, 0
	}
	var ue *UnsupportedError
	if errors.As(err, &ue) || errors.Is(err, errRedirect) || errors.Is(err, errPermanent) {
		return false, 0
	}
	return true, 0
}

// errRedirect marks redirect failures (loops, downgrades), which retrying
// does not fix.
var errRedirect = errors.New("picomq: redirect")

// errPermanent marks requests that could not even be built.
var errPermanent = errors.New("picomq: invalid request")

func (c *client) doOnce(ctx context.Context, cl *call) (*http.Response, error) {
	uri := c.requestURI(cl)
	owner := cl.owner.get()
	start := c.origin
	if owner != "" {
		start = owner
	}
	target := start + uri
	redirected := false
	for hop := 0; ; hop++ {
		// Only first hops are cached: a redirect's target is the
		// server's to choose, and after one the owner cache makes the
		// next call's first hop go there anyway.
		req, resp, err := c.sendHop(ctx, cl, target, hop == 0)
		if err != nil {
			if hop == 0 && owner != "" && isDialError(err) {
				// The remembered owner is gone: nothing was sent, so
				// start again at the configured node.
				cl.owner.set("")
				owner = ""
				target = c.origin + uri
				hop = -1
				continue
			}
			return nil, err
		}
		switch resp.StatusCode {
		case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			loc := resp.Header.Get("Location")
			drain(resp)
			if hop >= c.maxRedirects {
				return nil, fmt.Errorf("%w: %s %s: more than %d redirects", errRedirect, cl.method, target, c.maxRedirects)
			}
			next, err := req.URL.Parse(loc)
			if loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") {
				return nil, fmt.Errorf("%w: %s %s: bad Location %q", errRedirect, cl.method, target, loc)
			}
			if c.token != "" && req.URL.Scheme == "https" && next.Scheme != "https" {
				return nil, fmt.Errorf("%w: %s %s: refusing to send the token from https to %s", errRedirect, cl.method, target, next.Redacted())
			}
			target = next.String()
			redirected = true
			continue
		}
		if redirected && cl.owner != nil {
			// Remember the owner's base URL when the redirect kept the
			// request URI (the server redirects to owner + same URI).
			if base, ok := strings.CutSuffix(target, uri); ok {
				cl.owner.set(base)
			}
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 || resp.StatusCode == http.StatusNotModified {
			return resp, nil
		}
		var body []byte
		if cl.method != http.MethodHead {
			body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		}
		resp.Body.Close()
		return nil, newClientError(cl.method, target, resp, body, c.proto)
	}
}

// sendHop sends one hop of cl to target: rendered by sendMessage when
// this is a first hop to the stream's cached target and the call and
// target allow it, else as an http.Request through send. It returns the
// request the response answers (sendMessage's is its target's template).
func (c *client) sendHop(ctx context.Context, cl *call, target string, first bool) (*http.Request, *http.Response, error) {
	if first && cl.message && c.rt != nil {
		if lt := cl.owner.cachedLean(target); lt != nil {
			if resp, ok, err := c.sendMessage(ctx, cl, lt); ok {
				return lt.post, resp, err
			}
		}
	}
	req, err := c.newRequest(ctx, cl, target, first)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errPermanent, err)
	}
	resp, err := c.send(req)
	return req, resp, err
}

// newRequest builds one hop's request. With cache, target's parse comes
// from (and goes to) the stream's one-entry cache: on a hit the request is
// built for the empty URL, which http.NewRequest parses at no cost, and
// given the cached *url.URL and its Host, which is what http.NewRequest
// would have set from target (it is where the cached value came from).
func (c *client) newRequest(ctx context.Context, cl *call, target string, cache bool) (*http.Request, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	var u *url.URL
	if cache {
		u = cl.owner.cachedURL(target)
	}
	urlArg := target
	if u != nil {
		urlArg = ""
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, urlArg, body)
	if err != nil {
		return nil, err
	}
	switch {
	case u != nil:
		req.URL, req.Host = u, u.Host
	case cache:
		cl.owner.cacheURL(target, req.URL, c.leanTargetFor(req))
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// send sends one hop. A request the SDK's own routing transport would
// send the lean way goes to it directly, without http.Client.Do, whose
// machinery has nothing to do for it: the client has no Timeout and no
// cookie jar (it is the SDK's own, see newClient), redirects are the
// SDK's (CheckRedirect returns ErrUseLastResponse, so Do would return a
// 3xx as it came), and user info in the URL, for which Do would add basic
// authentication, keeps a request on Do. Errors are wrapped as Do wraps
// them, so they read the same either way.
func (c *client) send(req *http.Request) (*http.Response, error) {
	if c.rt == nil || req.URL.User != nil || !c.rt.useLean(req) {
		return c.hc.Do(req)
	}
	resp, err := c.rt.lean.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// urlErrorOp is the Op http.Client.Do gives a *url.Error for method
// ("Post", "Head").
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	if lower := strings.ToLower(method); lower != method {
		return method[:1] + lower[1:]
	}
	return method
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// drain discards a small rest of a body so the connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// maxPageBytes bounds a page body the SDK reads into memory.
const maxPageBytes = 256 << 20

// presizeBytes is the largest Content-Length readAll allocates up front:
// a node's largest page (max_bytes is capped at 16 MiB) and its framing.
const presizeBytes = 32 << 20

func readAll(resp *http.Response) ([]byte, error) { return readAllInto(resp, nil) }

// readAllInto is readAll that takes a body of known size into
// alloc(size) when alloc is set (a Records iterator's reused page
// buffers, RecordsOptions.ReuseBuffers).
func readAllInto(resp *http.Response, alloc func(int) []byte) ([]byte, error) {
	defer resp.Body.Close()
	if n := resp.ContentLength; n >= 0 && n <= presizeBytes {
		// A page of known size (every Pico read) is read into one buffer
		// of that size: growing one from 512 bytes copied and cleared a
		// catch-up page several times over. Larger announced sizes grow
		// as the bytes arrive, so a header alone cannot make the client
		// allocate much. A large page's buffer is fresh memory (its
		// records alias it, so it is never reused unless the iterator
		// was told it may be, alloc): it is backed by huge pages where
		// the kernel allows, one fault per 2 MiB instead of 512
		// (sdk/hugepage).
		var b []byte
		if alloc != nil {
			b = alloc(int(n))
		} else {
			b = hugepage.Make(int(n))
		}
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPageBytes {
		return nil, fmt.Errorf("picomq: response body above %d bytes", maxPageBytes)
	}
	return b, nil
}
