package httpx

import (
	"net/http"
	"strings"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// Allow serves h for the listed methods and answers every other method with
// 405, an Allow header and a JSON error. The node's own endpoints use it:
// a PUT /healthz answered 200 would read as "created" to a script.
func Allow(h http.Handler, methods ...string) http.Handler {
	allow := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		w.Header().Set(wire.HeaderErrorCode, wire.CodeMethodNotAllowed)
		WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
			r.Method+" is not supported on "+r.URL.Path+" (allowed: "+allow+")")
	})
}
