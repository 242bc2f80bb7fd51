package ds

import (
	"net/textproto"
	"testing"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestHeaderNamesCanonical: canonicalHeaderValue looks names up without
// canonicalising them, so every name it is given must be canonical
// already (else the header would never be found).
func TestHeaderNamesCanonical(t *testing.T) {
	for _, name := range []string{
		wire.DSHeaderClosed,
		wire.DSHeaderProducerEpoch,
		wire.DSHeaderProducerID,
		wire.DSHeaderProducerSeq,
		wire.DSHeaderSeq,
		wire.DSHeaderNextOffset,
	} {
		if c := textproto.CanonicalMIMEHeaderKey(name); c != name {
			t.Errorf("%q is not canonical (%q)", name, c)
		}
	}
}
