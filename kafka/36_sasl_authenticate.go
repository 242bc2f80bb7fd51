package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleSASLAuthenticate checks the bearer token a SASL exchange carries:
// PLAIN's password (the user name is ignored) or OAUTHBEARER's token
// (RFC 7628). With authentication off every exchange succeeds, so clients
// configured for SASL still connect. It may be repeated on a live
// connection (re-authentication).
func handleSASLAuthenticate(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if err := s.authenticate(cc, req.SASLAuthBytes); err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "authentication failed: " + err.Error()
		if cc.mechanism == mechOAuthBearer {
			msg = "invalid_token: " + err.Error()
		}
		resp.ErrorMessage = &msg
		return resp, nil
	}
	resp.SASLAuthBytes = []byte{}
	return resp, nil
}

// authenticate checks the client's SASL message for the connection's
// mechanism and records the outcome on cc: SaslAuthenticate's bytes, or
// the raw token that follows a SaslHandshake v0 (serveConn).
func (s *Server) authenticate(cc *connState, b []byte) error {
	token, err := saslToken(cc.mechanism, b)
	var p *auth.Principal
	if err == nil && s.cfg.Auth != nil {
		p, err = s.cfg.Auth.Authenticate(token)
		if err == nil && p.ScrapeOnly() {
			// A Prometheus credential: Metadata alone would list every topic.
			p, err = nil, errors.New("scrape-only token (scope metrics) cannot use Kafka")
		}
	}
	if err != nil {
		cc.authenticated.Store(s.cfg.Auth == nil)
		cc.principal = nil
		return err
	}
	cc.authenticated.Store(true)
	cc.principal = p
	return nil
}

// saslToken extracts the bearer token of a client's first (and only)
// SASL message.
func saslToken(mechanism string, b []byte) (string, error) {
	switch mechanism {
	case mechPlain:
		// authzid NUL authcid NUL passwd
		parts := bytes.SplitN(b, []byte{0}, 3)
		if len(parts) != 3 || len(parts[2]) == 0 {
			return "", errors.New("malformed PLAIN message")
		}
		return string(parts[2]), nil
	case mechOAuthBearer:
		// gs2-header ^A auth=Bearer <token> ^A [key=value ^A]* ^A
		for _, kv := range strings.Split(string(b), "\x01") {
			if v, ok := strings.CutPrefix(kv, "auth="); ok {
				scheme, tok, ok := strings.Cut(v, " ")
				if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
					return "", errors.New("malformed OAUTHBEARER auth value")
				}
				return strings.TrimSpace(tok), nil
			}
		}
		return "", errors.New("OAUTHBEARER message without auth=")
	case "":
		return "", errors.New("SaslAuthenticate before SaslHandshake")
	}
	return "", fmt.Errorf("mechanism %q", mechanism)
}
