package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL mechanisms carrying a bearer token (docs/kafka.md); SCRAM's are
// auth.ScramMechanisms (scram.go).
const (
	mechPlain       = "PLAIN"
	mechOAuthBearer = "OAUTHBEARER"
)

// handleSASLHandshake picks the mechanism for the SaslAuthenticate that
// follows (v1), or, after v0 (kafka-python 2.0.2 always sends v0), for
// the raw SASL token that is the connection's next frame: serveConn
// answers it with a raw frame (empty: success) or closes the connection,
// as Kafka does.
func handleSASLHandshake(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	mechanisms := s.mechanismNames()
	resp.SupportedMechanisms = mechanisms
	if !slices.Contains(mechanisms, req.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp, nil
	}
	cc.mechanism = req.Mechanism
	cc.scram = nil
	cc.rawSASL = req.Version == 0
	return resp, nil
}
