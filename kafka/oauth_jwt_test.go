package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// unsecuredJWT builds a compact unsecured JWS of a header and claims.
func unsecuredJWT(header, claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(claims)) + "."
}

// TestParseUnsecuredJWT: every rule of parseUnsecuredJWT, each case
// breaking exactly one.
func TestParseUnsecuredJWT(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour).Unix()
	none := `{"alg":"none"}`
	enc := base64.RawURLEncoding.EncodeToString
	for _, c := range []struct {
		desc, token, why string // why: "" = valid, else part of the error
	}{
		{"valid", unsecuredJWT(none, fmt.Sprintf(`{"sub":"admin","exp":%d}`, exp)), ""},
		{"valid with typ, iat, nbf, scope and a fractional exp", unsecuredJWT(`{"alg":"none","typ":"JWT"}`,
			fmt.Sprintf(`{"sub":"a","exp":%d.5,"iat":%d,"nbf":%d,"scope":"x y"}`, exp, now.Unix()-10, now.Unix())), ""},
		{"expired", unsecuredJWT(none, fmt.Sprintf(`{"sub":"admin","exp":%d}`, now.Add(-time.Minute).Unix())), "expired"},
		{"expired within the skew is still valid", unsecuredJWT(none, fmt.Sprintf(`{"sub":"admin","exp":%d}`, now.Add(-2*time.Second).Unix())), ""},
		{"no exp", unsecuredJWT(none, `{"sub":"admin"}`), "no exp"},
		{"exp a string", unsecuredJWT(none, `{"sub":"admin","exp":"soon"}`), "NumericDate"},
		{"exp null", unsecuredJWT(none, `{"sub":"admin","exp":null}`), "NumericDate"},
		{"exp huge", unsecuredJWT(none, `{"sub":"admin","exp":1e300}`), "NumericDate"},
		{"no sub", unsecuredJWT(none, fmt.Sprintf(`{"exp":%d}`, exp)), "sub missing"},
		{"empty sub", unsecuredJWT(none, fmt.Sprintf(`{"sub":"","exp":%d}`, exp)), "sub"},
		{"sub a number", unsecuredJWT(none, fmt.Sprintf(`{"sub":7,"exp":%d}`, exp)), "sub 7"},
		{"iat in the future", unsecuredJWT(none, fmt.Sprintf(`{"sub":"a","exp":%d,"iat":%d}`, exp, now.Add(time.Minute).Unix())), "iat"},
		{"nbf in the future", unsecuredJWT(none, fmt.Sprintf(`{"sub":"a","exp":%d,"nbf":%d}`, exp, now.Add(time.Minute).Unix())), "nbf"},
		{"iat not before exp", unsecuredJWT(none, fmt.Sprintf(`{"sub":"a","exp":%d,"iat":%d}`, now.Unix(), now.Unix())), "not before exp"},
		{"alg HS256", unsecuredJWT(`{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"a","exp":%d}`, exp)), "alg"},
		{"no alg", unsecuredJWT(`{}`, fmt.Sprintf(`{"sub":"a","exp":%d}`, exp)), "alg missing"},
		{"crit", unsecuredJWT(`{"alg":"none","crit":["x"]}`, fmt.Sprintf(`{"sub":"a","exp":%d}`, exp)), "crit"},
		{"signed", unsecuredJWT(none, fmt.Sprintf(`{"sub":"a","exp":%d}`, exp)) + "c2ln", "signed"},
		{"two parts", enc([]byte(none)) + "." + enc([]byte(`{"sub":"a"}`)), "3"},
		{"padded base64", enc([]byte(none)) + "=." + enc([]byte(`{"sub":"a"}`)) + ".", "base64url"},
		{"claims not an object", unsecuredJWT(none, `["sub"]`), "JSON object"},
		{"claims null", unsecuredJWT(none, `null`), "JSON object"},
		{"opaque bearer token", "pmq_not-a-jwt", "parts"},
		{"too long", unsecuredJWT(none, `{"sub":"`+strings.Repeat("a", maxJWTBytes)+`"}`), "bytes"},
	} {
		cl, err := parseUnsecuredJWT(c.token, now)
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%s: %v", c.desc, err)
		case c.why == "" && cl.Subject == "":
			t.Errorf("%s: no subject", c.desc)
		case c.why != "" && (err == nil || !errors.Is(err, errInvalidToken) || !strings.Contains(err.Error(), c.why)):
			t.Errorf("%s: error %v, want invalid_token mentioning %q", c.desc, err, c.why)
		}
	}
}

// FuzzParseUnsecuredJWT: any input is accepted or refused with
// errInvalidToken, never a panic, and an accepted one has a subject and
// an expiry after now (less the skew).
func FuzzParseUnsecuredJWT(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add(unsecuredJWT(`{"alg":"none"}`, `{"sub":"admin","exp":1800003600}`))
	f.Add(unsecuredJWT(`{"alg":"none","typ":"JWT"}`, `{"sub":"a","exp":1800003600.25,"iat":1799999990,"nbf":1}`))
	f.Add(unsecuredJWT(`{"alg":"none"}`, `{"sub":"admin","exp":1}`))
	f.Add(unsecuredJWT(`{"alg":"RS256"}`, `{"sub":"admin","exp":1800003600}`) + "sig")
	f.Add("a.b.c")
	f.Add("..")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := parseUnsecuredJWT(token, now)
		if err != nil {
			if !errors.Is(err, errInvalidToken) {
				t.Fatalf("error %v does not wrap errInvalidToken", err)
			}
			return
		}
		if c.Subject == "" || !c.Expiry.After(now.Add(-jwtClockSkew)) {
			t.Fatalf("accepted %q: %+v", token, c)
		}
	})
}

// TestOAuthUnsecuredJWTLogin: with Config.OAuthUnsecuredJWT a franz-go
// client logs in over OAUTHBEARER with an unexpired unsecured JWT; an
// expired one, or an opaque token, fails with SASL_AUTHENTICATION_FAILED
// and RFC 7628's invalid_token status in the message. Without the option
// (authentication off) every OAUTHBEARER token is accepted, as before.
func TestOAuthUnsecuredJWTLogin(t *testing.T) {
	ping := func(ts *testServer, token string) error {
		cl := ts.client(kgo.SASL(oauth.Auth{Token: token}.AsMechanism()), kgo.RequestRetries(0))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	jwt := func(exp time.Time) string {
		return unsecuredJWT(`{"alg":"none"}`, fmt.Sprintf(`{"sub":"admin","exp":%d}`, exp.Unix()))
	}
	ts := startServer(t, Config{OAuthUnsecuredJWT: true})
	if err := ping(ts, jwt(time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("valid unsecured JWT: %v", err)
	}
	for _, tok := range []string{jwt(time.Now().Add(-time.Minute)), "pmq_opaque-token"} {
		err := ping(ts, tok)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), `{"status":"invalid_token"}`) {
			t.Errorf("token %q: %v, want SASL_AUTHENTICATION_FAILED with invalid_token", tok, err)
		}
	}
	open := startServer(t, Config{})
	if err := ping(open, jwt(time.Now().Add(-time.Minute))); err != nil {
		t.Errorf("authentication off, no JWT validation: %v", err)
	}
}
