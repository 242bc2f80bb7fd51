package kafka

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Unsecured JWTs for SASL OAUTHBEARER (Config.OAuthUnsecuredJWT).
//
// Why: Kafka's OAUTHBEARER, out of the box, validates the token as an
// unsecured JWS (RFC 7515 compact form with "alg":"none", RFC 7519 §6):
// a development setting, but it is what clients and their test suites
// (franz-go's TestOAuthAuth) expect: a well-formed, unexpired token logs
// in as its subject, an expired one fails with invalid_token. Such a
// token proves nothing (anyone can write one), so the option is refused
// together with --auth-tokens (node config): it never grants scopes.

// maxJWTBytes bounds a token before any decoding; real ones are well
// under 2 KiB.
const maxJWTBytes = 8 << 10

// jwtClockSkew is the clock difference allowed between the token's
// issuer and this node when exp, iat and nbf are checked. Kafka's
// unsecured validator allows none by default; a few seconds keep a
// freshly issued token from being refused by a node whose clock is a
// little behind, and an expired token is still refused within seconds.
const jwtClockSkew = 5 * time.Second

// jwtClaims are the claims PicoMQ reads from a validated token.
type jwtClaims struct {
	Subject string
	Expiry  time.Time
	Scopes  []string // the scope claim's words
}

// errInvalidToken marks every validation failure: SaslAuthenticate
// answers it with RFC 7628's {"status":"invalid_token"}.
var errInvalidToken = errors.New("invalid_token")

// parseUnsecuredJWT validates token as an unsecured JWT at time now:
// three base64url (unpadded) parts, a header whose alg is "none" and that
// names no critical extension, an empty signature, and the claims
// checkClaims checks. Errors wrap errInvalidToken and say which rule
// failed.
func parseUnsecuredJWT(token string, now time.Time) (jwtClaims, error) {
	return parseJWT(token, now, nil)
}

// parseJWT validates token at time now: unsecured (alg none, empty
// signature) when keys is nil, else signed (RS256 or ES256) by one of
// keys (oauth_jwks.go).
func parseJWT(token string, now time.Time, keys *JWTKeys) (jwtClaims, error) {
	if len(token) > maxJWTBytes {
		return jwtClaims{}, invalidToken("token of %d bytes (at most %d)", len(token), maxJWTBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return jwtClaims{}, invalidToken("not a compact JWS (%d dot-separated parts, want 3)", len(parts))
	}
	header, err := jwtObject(parts[0])
	if err != nil {
		return jwtClaims{}, invalidToken("header: %v", err)
	}
	var alg string
	if err := json.Unmarshal(header["alg"], &alg); err != nil {
		return jwtClaims{}, invalidToken(`header alg %s, want a string`, orMissing(header["alg"]))
	}
	if _, ok := header["crit"]; ok {
		return jwtClaims{}, invalidToken("header names critical extensions (crit), none are understood")
	}
	if keys == nil {
		if alg != "none" {
			return jwtClaims{}, invalidToken(`header alg %q, want "none"`, alg)
		}
		if parts[2] != "" {
			return jwtClaims{}, invalidToken("signed tokens are not accepted (the unsecured validator takes alg none, empty signature)")
		}
	} else if err := keys.verify(header, alg, parts); err != nil {
		return jwtClaims{}, err
	}
	claims, err := jwtObject(parts[1])
	if err != nil {
		return jwtClaims{}, invalidToken("claims: %v", err)
	}
	return checkClaims(claims, now)
}

func invalidToken(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalidToken}, args...)...)
}

// checkClaims: a non-empty string sub, a numeric exp after now (less the
// skew), iat and nbf, when present, numbers not after now (plus the
// skew), iat before exp; scope, when present, a space-separated string.
func checkClaims(claims map[string]json.RawMessage, now time.Time) (jwtClaims, error) {
	var c jwtClaims
	if err := json.Unmarshal(claims["sub"], &c.Subject); err != nil || c.Subject == "" {
		return jwtClaims{}, invalidToken("sub %s, want a non-empty string", orMissing(claims["sub"]))
	}
	exp, ok, err := numericDate(claims, "exp")
	switch {
	case err != nil:
		return jwtClaims{}, invalidToken("%v", err)
	case !ok:
		return jwtClaims{}, invalidToken("no exp claim (required)")
	case !exp.After(now.Add(-jwtClockSkew)):
		return jwtClaims{}, invalidToken("expired at %s (now %s)", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	c.Expiry = exp
	for _, name := range []string{"iat", "nbf"} {
		t, ok, err := numericDate(claims, name)
		if err != nil {
			return jwtClaims{}, invalidToken("%v", err)
		}
		if ok && t.After(now.Add(jwtClockSkew)) {
			return jwtClaims{}, invalidToken("%s %s is in the future (now %s)", name, t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		if ok && name == "iat" && !t.Before(exp) {
			return jwtClaims{}, invalidToken("iat %s is not before exp %s", t.UTC().Format(time.RFC3339), exp.UTC().Format(time.RFC3339))
		}
	}
	if raw, ok := claims["scope"]; ok {
		var scope string
		if err := json.Unmarshal(raw, &scope); err != nil {
			return jwtClaims{}, invalidToken("scope %s, want a space-separated string (RFC 8693)", raw)
		}
		c.Scopes = strings.Fields(scope)
	}
	return c, nil
}

// jwtObject decodes one base64url part into a JSON object's members.
func jwtObject(part string) (map[string]json.RawMessage, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(part)
	if err != nil {
		return nil, fmt.Errorf("not unpadded base64url: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// numericDate reads claim name as an RFC 7519 NumericDate (seconds since
// the epoch, fractions allowed); ok is false when it is absent.
func numericDate(claims map[string]json.RawMessage, name string) (time.Time, bool, error) {
	raw, ok := claims[name]
	if !ok {
		return time.Time{}, false, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || bytes.Equal(raw, []byte("null")) || math.IsNaN(f) || math.Abs(f) > 1e11 {
		return time.Time{}, false, fmt.Errorf("%s %s is not a NumericDate (seconds since 1970)", name, raw)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, nil
}

func orMissing(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return string(raw)
}
