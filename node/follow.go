package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// followPrefix is the path of reads through this node:
// GET /_sys/follow/orders/eu?… reads stream /orders/eu exactly as
// GET /orders/eu?… does, but when another node serves the stream this
// node fetches the answer from there instead of answering 307. The web
// console reads streams this way: its Content-Security-Policy allows only
// the node it was loaded from, and a browser drops the Authorization
// header on a redirect to another origin (docs/console.md).
const followPrefix = "/_sys/follow/"

// maxFollowHops bounds the redirects followed for one read (an owner that
// just handed the stream on redirects once more).
const maxFollowHops = 3

// followName is the stream name a follow path reads.
func followName(p string) string { return p[len(followPrefix)-1:] }

// followHeaders are the request headers a followed read passes on: the
// caller's token and what selects the answer's form.
var followHeaders = []string{"Authorization", "Accept", "Last-Event-Id", "If-None-Match"}

// follow serves a read of a stream with proto (the Pico handler), and when
// that answers 307 to another live node, proxies the same read from there,
// streaming the answer (server-sent events included) as it arrives.
func (n *Node) follow(proto http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := followName(r.URL.Path)
		if strings.HasPrefix(name, "/_") {
			// Reserved paths (listings, the node's routes) are not
			// streams: their own routes and checks serve them.
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeReservedName, "not a stream: "+name)
			return
		}
		local := r.Clone(r.Context())
		local.URL.Path = name
		local.URL.RawPath = ""
		if raw := r.URL.RawPath; raw != "" && strings.HasPrefix(raw, followPrefix) {
			local.URL.RawPath = followName(raw)
		}
		local.RequestURI = local.URL.RequestURI()
		rw := &redirectCatcher{w: w, header: http.Header{}}
		proto.ServeHTTP(rw, local)
		if rw.location == "" {
			rw.finish()
			return
		}
		n.proxyRead(w, r, rw.location)
	})
}

// proxyRead fetches location, a stream URL on another node, and copies
// its answer to w; it follows up to maxFollowHops redirects, each only to
// a live member's advertise URL.
func (n *Node) proxyRead(w http.ResponseWriter, r *http.Request, location string) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	for hop := 0; ; hop++ {
		if !n.isMemberURL(ctx, location) {
			httpx.WriteError(w, http.StatusBadGateway, wire.CodeUnavailable, "the stream's owner is not a live node: "+location)
			return
		}
		req, err := http.NewRequestWithContext(ctx, r.Method, location, nil)
		if err != nil {
			httpx.WriteError(w, http.StatusBadGateway, wire.CodeUnavailable, "bad owner URL: "+err.Error())
			return
		}
		for _, h := range followHeaders {
			if v := r.Header.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
		resp, err := n.peers.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return // the caller went away
			}
			httpx.WriteError(w, http.StatusBadGateway, wire.CodeUnavailable, "reading from the stream's owner: "+err.Error())
			return
		}
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusTemporaryRedirect && loc != "" && hop+1 < maxFollowHops {
			resp.Body.Close()
			location = loc
			continue
		}
		copyAnswer(w, resp, cancel)
		return
	}
}

const (
	servedByHeader = "Pico-Served-By"
	// readFromHeader names the node a followed read was served by.
	readFromHeader = "Pico-Read-From"
)

// followIdle ends a followed answer the owner sent nothing of for this
// long: a live tail gets a keep-alive every 15 s, so only a dead owner or
// a dead path between the nodes is this quiet.
const followIdle = 45 * time.Second

// copyAnswer copies an owner's answer: its headers but the hop-by-hop
// ones, its status, and its body, flushed as it arrives (a live read's
// events must not wait in a buffer). cancel ends the owner's request; it
// is called when the owner is silent for followIdle.
func copyAnswer(w http.ResponseWriter, resp *http.Response, cancel context.CancelFunc) {
	defer resp.Body.Close()
	idle := time.AfterFunc(followIdle, cancel)
	defer idle.Stop()
	h := w.Header()
	for k, vs := range resp.Header {
		switch k {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Proxy-Connection", "Upgrade", "Trailer":
			continue
		case servedByHeader:
			// This node answered; the owner served the read.
			h[readFromHeader] = vs
			continue
		}
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		idle.Reset(followIdle)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return
			}
		}
		if err != nil {
			return // io.EOF, or the owner or the caller went away
		}
	}
}

// isMemberURL reports whether u is on a live member's advertise URL.
func (n *Node) isMemberURL(ctx context.Context, u string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ms, err := n.reg.Members(ctx)
	if err != nil {
		return false
	}
	for _, m := range ms {
		base := strings.TrimSuffix(m.AdvertiseURL, "/")
		if base != "" && strings.HasPrefix(u, base+"/") {
			return true
		}
	}
	return false
}

// redirectCatcher holds a handler's answer until its status is known: a
// 307 with a Location is kept back (follow fetches it instead), anything
// else goes to w as it was written.
type redirectCatcher struct {
	w        http.ResponseWriter
	header   http.Header
	location string
	wrote    bool
}

func (c *redirectCatcher) Header() http.Header {
	if c.wrote {
		return c.w.Header()
	}
	return c.header
}

func (c *redirectCatcher) WriteHeader(status int) {
	if c.wrote || c.location != "" {
		return
	}
	if loc := c.header.Get("Location"); status == http.StatusTemporaryRedirect && loc != "" {
		c.location = loc
		return
	}
	c.wrote = true
	for k, vs := range c.header {
		c.w.Header()[k] = vs
	}
	c.w.WriteHeader(status)
}

func (c *redirectCatcher) Write(b []byte) (int, error) {
	if !c.wrote && c.location == "" {
		c.WriteHeader(http.StatusOK)
	}
	if c.location != "" {
		return len(b), nil // the redirect's body is not sent
	}
	return c.w.Write(b)
}

// finish writes the header of a handler that wrote nothing.
func (c *redirectCatcher) finish() {
	if !c.wrote && c.location == "" {
		c.WriteHeader(http.StatusOK)
	}
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines of live reads).
func (c *redirectCatcher) Unwrap() http.ResponseWriter { return c.w }

// Flush sends what is written so far (live reads flush every event).
func (c *redirectCatcher) Flush() {
	if !c.wrote && c.location == "" {
		c.WriteHeader(http.StatusOK)
	}
	if c.location == "" {
		_ = http.NewResponseController(c.w).Flush()
	}
}
