package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleSASLAuthenticate runs one step of the SASL exchange: PLAIN's
// password (the user name is ignored) or OAUTHBEARER's token (RFC 7628)
// is a bearer token checked at once; SCRAM takes two steps
// (scramStep). With authentication off every PLAIN and OAUTHBEARER
// exchange succeeds, so clients configured for SASL still connect (an
// OAUTHBEARER token must be a valid unsecured JWT with
// Config.OAuthUnsecuredJWT); SCRAM
// always checks the user's credential (its answer carries a signature
// only the credential can make). It may be repeated on a live connection
// (re-authentication).
func handleSASLAuthenticate(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	out, _, err := s.authenticate(ctx, cc, req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "authentication failed: " + err.Error()
		if cc.mechanism == mechOAuthBearer {
			// RFC 7628 §3.2.2's error status, which Kafka puts in the
			// message too, then why.
			msg = `{"status":"invalid_token"} ` + strings.TrimPrefix(err.Error(), errInvalidToken.Error()+": ")
		}
		resp.ErrorMessage = &msg
		return resp, nil
	}
	if out == nil {
		out = []byte{}
	}
	resp.SASLAuthBytes = out
	return resp, nil
}

// authenticate runs one client SASL message of the connection's mechanism
// and records the outcome on cc: SaslAuthenticate's bytes, or a raw frame
// after a SaslHandshake v0 (serveConn). It returns the server's answer
// and whether the exchange is complete.
func (s *Server) authenticate(ctx context.Context, cc *connState, b []byte) ([]byte, bool, error) {
	if m, ok := auth.ScramByName(cc.mechanism); ok {
		out, done, err := s.scramStep(ctx, cc, m, b)
		if err != nil {
			s.saslFailed(cc)
			s.logins.count(cc.mechanism, false)
			return nil, false, err
		}
		if done {
			s.logins.count(cc.mechanism, true)
		}
		return out, done, nil
	}
	token, err := saslToken(cc.mechanism, b)
	var p *auth.Principal
	if err == nil && s.cfg.Auth == nil && s.cfg.OAuthUnsecuredJWT && cc.mechanism == mechOAuthBearer {
		_, err = parseUnsecuredJWT(token, time.Now())
	}
	if err == nil && s.cfg.Auth != nil {
		p, err = s.bearer(cc.mechanism, token)
		if err == nil && p.ScrapeOnly() {
			// A Prometheus credential: Metadata alone would list every topic.
			p, err = nil, errors.New("scrape-only token (scope metrics) cannot use Kafka")
		}
	}
	s.logins.count(cc.mechanism, err == nil)
	if err != nil {
		s.saslFailed(cc)
		return nil, false, err
	}
	cc.authenticated.Store(true)
	cc.principal = p
	return nil, true, nil
}

// bearer authenticates a PLAIN or OAUTHBEARER token: an OAUTHBEARER
// token shaped like a JWT (two dots) is checked against Config.OAuthKeys
// first, then, refused, as a PicoMQ token (whose text is free); if both
// refuse it the JWT's reason is the answer.
func (s *Server) bearer(mechanism, token string) (*auth.Principal, error) {
	if s.cfg.OAuthKeys == nil || mechanism != mechOAuthBearer || strings.Count(token, ".") != 2 {
		return s.cfg.Auth.Authenticate(token)
	}
	p, jwtErr := s.cfg.OAuthKeys.principal(token, time.Now())
	if jwtErr == nil {
		return p, nil
	}
	if p, err := s.cfg.Auth.Authenticate(token); err == nil {
		return p, nil
	}
	return nil, jwtErr
}

// saslFailed logs the connection out: a failed exchange (a failed
// re-authentication too) leaves it unauthenticated.
func (s *Server) saslFailed(cc *connState) {
	cc.scram = nil
	cc.authenticated.Store(s.cfg.Auth == nil)
	cc.principal = nil
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
