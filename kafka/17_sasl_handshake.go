package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL mechanisms: both carry a bearer token (docs/kafka.md).
const (
	mechPlain       = "PLAIN"
	mechOAuthBearer = "OAUTHBEARER"
)

var mechanisms = []string{mechPlain, mechOAuthBearer}

// handleSASLHandshake picks the mechanism for the SaslAuthenticate that
// follows (v1 only: v0's unframed tokens are legacy).
func handleSASLHandshake(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = mechanisms
	if !slices.Contains(mechanisms, req.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp, nil
	}
	cc.mechanism = req.Mechanism
	return resp, nil
}
