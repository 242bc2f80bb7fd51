package node

import (
	"net/http"
	"strings"

	"github.com/PicoMQ/picomq/api/console"
	"github.com/PicoMQ/picomq/api/ds"
	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// access is what a request needs: a level on a stream name (or name
// prefix), authentication only (level 0), or nothing at all (public).
type access struct {
	public  bool
	metrics bool // GET /metrics: the one request a scrape-only token may make
	level   auth.Level
	name    string
}

// route is one reserved path of the node: what a request on it needs
// (the guard reads it) and what serves it (the router reads it). A path
// starting with "/_" that no route names is denied unless the token is an
// admin of "/" (then the protocol handler answers 404): a new endpoint is
// closed until its route says who may call it.
type route struct {
	path   string
	prefix bool // path is a prefix ("/_streams/"), not an exact path
	need   func(r *http.Request) access
	// serve handles the route; nil: the protocol handler does.
	serve http.Handler
	// direct routes are served before the client tokens and the append
	// budget (Direct): they authenticate on their own (replication: the
	// cluster secret).
	direct bool
}

var (
	needPublic   = func(*http.Request) access { return access{public: true} }
	needAnyToken = func(*http.Request) access { return access{} }
	needMetrics  = func(*http.Request) access { return access{metrics: true} }
	needAdminAll = func(*http.Request) access { return access{level: auth.Admin, name: "/"} }
)

// nodeHandlers serve the node's own routes; nil ones in tests that only
// classify.
type nodeHandlers struct {
	healthz, readyz, metrics, drain, cluster, groups, console http.Handler
	sysNode                                                   http.Handler // /_sys/node: the node's figures
	follow                                                    http.Handler // /_sys/follow/…: reads through this node (Pico)
	replica                                                   http.Handler // /_sys/replica/…, node/replication
}

// routeTable is the one table of reserved routes, read by routing
// (ServeHTTP) and by authorisation (classify); docs/security.md lists it.
type routeTable struct {
	protocol string
	exact    map[string]route
	prefixes []route
	proto    http.Handler // streams and the protocol's own routes
}

func newRouteTable(protocol string, h nodeHandlers, proto http.Handler) *routeTable {
	routes := []route{
		{path: "/healthz", need: needPublic, serve: h.healthz},
		{path: "/readyz", need: needPublic, serve: h.readyz},
		{path: "/metrics", need: needMetrics, serve: h.metrics},
		{path: "/_sys/drain", need: needAdminAll, serve: h.drain},
		{path: "/_sys/cluster", need: needAnyToken, serve: h.cluster},
		// The console's pages and assets are static bytes, the same for
		// everyone; every datum it shows comes from the routes above and
		// the stream routes, with the operator's token (docs/console.md).
		// Consumer groups reveal topic names and lag: the same as
		// listing every stream (read on "/").
		{path: "/_sys/groups", need: func(*http.Request) access { return access{level: auth.Read, name: "/"} }, serve: h.groups},
		// A node's own figures (the Cluster page asks every node); the
		// heads of named streams are offsets, read on "/" like groups.
		{path: "/_sys/node", need: func(r *http.Request) access {
			if r.URL.Query().Has("head") {
				return access{level: auth.Read, name: "/"}
			}
			return access{}
		}, serve: h.sysNode},
		{path: "/_console", need: needPublic, serve: h.console},
		{path: console.Prefix, prefix: true, need: needPublic, serve: h.console},
		// Replication between nodes: the cluster secret, checked by
		// node/replication itself, not a client token.
		{path: "/_sys/replica/", prefix: true, need: needPublic, serve: h.replica, direct: true},
	}
	if protocol == ProtocolPico {
		routes = append(routes,
			route{path: wire.PathStreams, need: func(r *http.Request) access {
				prefix := r.URL.Query().Get(wire.QueryPrefix)
				if prefix == "" {
					prefix = "/"
				}
				return access{level: auth.Read, name: prefix}
			}},
			// A read of a stream through this node, which fetches it
			// from the owner when it does not serve it (node/follow.go):
			// the same access as the read itself.
			route{path: followPrefix, prefix: true, need: func(r *http.Request) access {
				return access{level: auth.Read, name: followName(r.URL.Path)}
			}, serve: h.follow},
			route{path: wire.PathStreams + "/", prefix: true, need: func(r *http.Request) access {
				name := strings.TrimPrefix(r.URL.Path, wire.PathStreams)
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					return access{level: auth.Read, name: name}
				}
				return access{level: auth.Admin, name: name}
			}})
	}
	t := &routeTable{protocol: protocol, exact: map[string]route{}, proto: proto}
	for _, rt := range routes {
		if rt.prefix {
			t.prefixes = append(t.prefixes, rt)
		} else {
			t.exact[rt.path] = rt
		}
	}
	return t
}

// Direct serves the table's direct routes and hands every other request
// to next (the guard, the append budget, then ServeHTTP).
func (t *routeTable) Direct(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt, ok := t.lookup(r.URL.Path); ok && rt.direct && rt.serve != nil {
			rt.serve.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (t *routeTable) lookup(p string) (route, bool) {
	if rt, ok := t.exact[p]; ok {
		return rt, true
	}
	for _, rt := range t.prefixes {
		if strings.HasPrefix(p, rt.path) {
			return rt, true
		}
	}
	return route{}, false
}

// ServeHTTP serves the node's own routes (exact matches, and the prefix
// routes with a handler, looked at only for paths under "/_") and hands
// every other request to the protocol handler: one map lookup per stream
// request, no router, no request copy. Paths are never cleaned: stream names are
// validated, not silently turned into another name.
func (t *routeTable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if rt, ok := t.exact[p]; ok && rt.serve != nil {
		rt.serve.ServeHTTP(w, r)
		return
	}
	if len(p) > 1 && p[1] == '_' { // only reserved paths have prefix routes
		for _, rt := range t.prefixes {
			if rt.serve != nil && strings.HasPrefix(p, rt.path) {
				rt.serve.ServeHTTP(w, r)
				return
			}
		}
	}
	t.proto.ServeHTTP(w, r)
}

// classify maps a request onto the access it needs: a reserved route's
// from the table, else the stream rules (docs/security.md); the stream
// name is derived exactly as the protocol handlers derive it, so the
// checked name is the served one.
func (t *routeTable) classify(r *http.Request) access {
	p := r.URL.Path
	if !strings.HasPrefix(p, "/") {
		return access{} // not a stream (e.g. "*"): any valid token; the router answers
	}
	if rt, ok := t.lookup(p); ok {
		return rt.need(r)
	}
	if strings.HasPrefix(p, "/_") {
		return needAdminAll(r) // reserved, and no route grants it
	}
	if r.Method == http.MethodOptions {
		// CORS preflight carries no credentials by design and reveals
		// nothing; the request that follows is checked.
		return access{public: true}
	}
	name := p
	if t.protocol == ProtocolDurableStreams {
		rest, ok := strings.CutPrefix(p, ds.Prefix)
		if !ok || !strings.HasPrefix(rest, "/") {
			return access{} // any valid token; the handler answers 404
		}
		name = rest
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return access{level: auth.Read, name: name}
	case http.MethodPost, http.MethodPut:
		return access{level: auth.Write, name: name}
	case http.MethodDelete:
		return access{level: auth.Admin, name: name}
	}
	return access{}
}
