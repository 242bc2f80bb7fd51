package httpx

import (
	"errors"
	"net/http"

	"github.com/PicoMQ/picomq/node/stream"
)

// CodeRedirect is the error code of a 307 to the node that owns a stream.
const CodeRedirect = "redirect"

// CodeProtocolMismatch is the error code of a 421: the stream is served by
// a node whose HTTP listener speaks the other protocol.
const CodeProtocolMismatch = "protocol_mismatch"

// SetRedirect sets Location for a stream owned by another node: the owner's
// advertise URL with the same path and query, so any HTTP client that
// follows 307 (re-sending method and body) lands on the owner. It reports
// whether err was such a redirect.
func SetRedirect(w http.ResponseWriter, r *http.Request, err error) bool {
	var re *stream.RedirectError
	if !errors.As(err, &re) {
		return false
	}
	w.Header().Set("Pico-Owner", re.NodeID)
	if re.Mismatch() {
		return false // no Location: the same path there is another protocol's
	}
	w.Header().Set("Location", re.URL+r.URL.RequestURI())
	return true
}
