package node

import (
	"net/http"
	"time"
)

// Connection bounds: the one statement of how long a client may take at
// each stage of a connection, on every listener, authenticated or not.
// docs/security.md ("Connection bounds") is this table for users, with
// the test that holds each line.
//
//	stage                                    bound                   enforced by
//	HTTP new connection: first byte + head   --read-header-timeout   h1lane (from accept) / net/http ReadHeaderTimeout;
//	  (TLS handshake included)               from the accept         a hand-off keeps the lane's deadline
//	HTTP keep-alive: wait for next request   --idle-timeout          h1lane / net/http IdleTimeout
//	HTTP later head, from its first byte     --read-header-timeout   h1lane / net/http
//	HTTP request body, any method, read by   --body-timeout from     h1lane (BodyTimeout) / bodyDeadline below; net/http
//	  the handler or drained after it        the end of the head     drains <= 256 KiB, more closes the connection
//	Kafka before SASL login (auth on)        --read-header-timeout   kafka Config.AuthTimeout: every byte before the
//	                                         from the accept         login, whatever is sent meanwhile
//	Kafka first request (auth off)           --read-header-timeout   kafka Config.AuthTimeout
//	                                         from the accept
//	Kafka between requests (logged in)       10 min                  kafka Config.IdleTimeout
//	Kafka rest of a frame after its size     --body-timeout          kafka Config.FrameTimeout
//	connections per listener                 --max-connections       limitListener: more are closed at accept
//
// What a handler does after the request is read (long-polls, SSE, an
// append waiting for its fsync) has its own caps (--long-poll-timeout,
// --sse-timeout); they are not connection stages.
type connBounds struct {
	readHeader, body, idle time.Duration
}

func (c Config) connBounds() connBounds {
	return connBounds{readHeader: c.ReadHeaderTimeout, body: c.BodyTimeout, idle: c.IdleTimeout}
}

// bodyDeadline gives every request that has a body, whatever its method
// and whether or not it is authorised, the body stage's deadline. A
// handler that answers without reading the body (a 401, a 404, a GET
// with a body) leaves it to net/http, which drains it under this
// deadline, so a body that never arrives cannot hold the connection.
// (The lane sets the same deadline itself; there this is a no-op.)
func (b connBounds) bodyDeadline(next http.Handler) http.Handler {
	if b.body <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			setReadDeadline(w, time.Now().Add(b.body))
		}
		next.ServeHTTP(w, r)
	})
}
