// Package console serves the node's web console under /_console/: a few
// plain ES modules and a stylesheet embedded in the binary, so a node
// needs nothing else (no CDN, no JavaScript build step). The console reads
// the node's public JSON API from the browser with the operator's bearer
// token; this package serves only static bytes and never sees data, which
// is why the route is public and authorisation stays on the API routes.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path every console page and asset lives under.
const Prefix = "/_console/"

//go:embed assets
var assets embed.FS

// csp allows only the node's own scripts, styles and API: no inline
// script or style (the pages use none), no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// started stands in for the assets' modification time: they change only
// with the binary.
var started = time.Now()

// Handler serves the console. A path naming an embedded asset
// (/_console/assets/…) gets that file; every other path under the prefix
// gets the page shell, so a deep link (/_console/streams/orders/1) loads
// the app, which routes on location.pathname.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, Prefix)
		if name, ok := strings.CutPrefix(rest, "assets/"); ok {
			name = path.Clean("/" + name)[1:]
			b, err := fs.ReadFile(sub, name)
			if err != nil || name == "index.html" {
				http.NotFound(w, r)
				return
			}
			h.Set("Cache-Control", "no-cache")
			h.Set("Content-Type", contentType(name))
			http.ServeContent(w, r, name, started, bytes.NewReader(b))
			return
		}
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Type", "text/html; charset=utf-8")
		http.ServeContent(w, r, "index.html", started, bytes.NewReader(index))
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".html":
		return "text/html; charset=utf-8"
	}
	return "application/octet-stream"
}
