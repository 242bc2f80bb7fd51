package kafka

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/PicoMQ/picomq/auth"
)

var b64 = base64.RawURLEncoding.EncodeToString

// testSigners are an RSA and a P-256 key and their JWK Set.
type testSigners struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	jwks []byte
}

func newTestSigners(t testing.TB) testSigners {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err := ek.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	jwks := fmt.Sprintf(`{"keys":[
		{"kty":"RSA","kid":"r1","use":"sig","alg":"RS256","n":%q,"e":%q},
		{"kty":"EC","kid":"e1","crv":"P-256","x":%q,"y":%q},
		{"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"}]}`,
		b64(rk.N.Bytes()), b64(big.NewInt(int64(rk.E)).Bytes()), b64(ecPub[1:33]), b64(ecPub[33:]))
	return testSigners{rsa: rk, ec: ek, jwks: []byte(jwks)}
}

// sign makes a compact JWS of claims with alg RS256 (kid r1) or ES256
// (kid e1); key, when set, signs instead of the test key (a forgery).
func (ts testSigners) sign(t testing.TB, alg, claims string, key crypto.Signer) string {
	t.Helper()
	kid := map[string]string{"RS256": "r1", "ES256": "e1"}[alg]
	input := b64([]byte(fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"JWT"}`, alg, kid))) + "." + b64([]byte(claims))
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	var err error
	switch alg {
	case "RS256":
		k := ts.rsa
		if key != nil {
			k = key.(*rsa.PrivateKey)
		}
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	case "ES256":
		k := ts.ec
		if key != nil {
			k = key.(*ecdsa.PrivateKey)
		}
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, k, sum[:])
		if err == nil {
			sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + b64(sig)
}

// TestParseJWKS: the keys a set yields, and the sets refused.
func TestParseJWKS(t *testing.T) {
	s := newTestSigners(t)
	k, err := ParseJWKS(s.jwks)
	if err != nil || len(k.byID) != 2 || k.only != nil {
		t.Fatalf("test set: %v, %d keys (the enc key is left out)", err, len(k.byID))
	}
	for _, c := range []struct{ desc, set, why string }{
		{"not JSON", `{`, "not a JWK Set"},
		{"no keys", `{"keys":[]}`, "no RS256 or ES256"},
		{"only an HS256 key", `{"keys":[{"kty":"oct","alg":"HS256","k":"c2VjcmV0"}]}`, "no RS256"},
		{"unknown kty", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, "kty"},
		{"short RSA modulus", `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`, "bits"},
		{"RSA without e", fmt.Sprintf(`{"keys":[{"kty":"RSA","n":%q}]}`, b64(s.rsa.N.Bytes())), "e:"},
		{"even exponent", fmt.Sprintf(`{"keys":[{"kty":"RSA","n":%q,"e":"Ag"}]}`, b64(s.rsa.N.Bytes())), "exponent"},
		{"P-384", `{"keys":[{"kty":"EC","crv":"P-384","x":"AQ","y":"AQ"}]}`, "crv"},
		{"point off the curve", `{"keys":[{"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}]}`, "point"},
		{"long coordinate", fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","x":%q,"y":"AQ"}]}`, b64(append([]byte{1}, make([]byte, 39)...))), "32 bytes"},
		{"kid twice", fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"a","n":%q,"e":"AQAB"},{"kty":"RSA","kid":"a","n":%q,"e":"AQAB"}]}`,
			b64(s.rsa.N.Bytes()), b64(s.rsa.N.Bytes())), "twice"},
	} {
		if _, err := ParseJWKS([]byte(c.set)); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want an error mentioning %q", c.desc, err, c.why)
		}
	}
}

// FuzzParseJWKS: any set is parsed or refused, never a panic; a parsed
// one has a key.
func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(newTestSigners(f).jwks))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AQ","y":"AQ"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseJWKS(b)
		if err == nil && len(k.byID) == 0 {
			t.Fatal("a set without keys parsed")
		}
	})
}

// FuzzParseSignedJWT: any token is accepted or refused with
// errInvalidToken against the test keys, never a panic; only what the
// test keys signed can pass, so an accepted token must carry a seed's
// header and claims.
func FuzzParseSignedJWT(f *testing.F) {
	s := newTestSigners(f)
	keys, err := ParseJWKS(s.jwks)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	seeds := map[string]bool{}
	for _, alg := range []string{"RS256", "ES256"} {
		tok := s.sign(f, alg, `{"sub":"a","exp":1800003600,"scope":"admin:/"}`, nil)
		seeds[tok[:strings.LastIndexByte(tok, '.')]] = true
		f.Add(tok)
	}
	f.Add(unsecuredJWT(`{"alg":"none"}`, `{"sub":"a","exp":1800003600}`))
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := parseJWT(token, now, keys)
		if err != nil {
			if !errors.Is(err, errInvalidToken) {
				t.Fatalf("error %v does not wrap errInvalidToken", err)
			}
			return
		}
		if !seeds[token[:strings.LastIndexByte(token, '.')]] {
			t.Fatalf("accepted a token the test keys did not sign: %q %+v", token, c)
		}
	})
}

// TestOAuthSignedJWTLogin: with Config.OAuthKeys and authentication on, a
// franz-go client logs in over OAUTHBEARER with an RS256 or ES256 JWT
// signed by a key of the set, and the scope claim is what it may do: a
// token with admin:/ produces, one with read:/other/ is refused the
// produce (TOPIC_AUTHORIZATION_FAILED). Refused at login with
// invalid_token: expired, forged (another key), unsecured (alg none), and
// a token with no PicoMQ scope; a PicoMQ token over OAUTHBEARER and PLAIN
// still works.
func TestOAuthSignedJWTLogin(t *testing.T) {
	const root = "pmq_root-token-for-jwt-tests"
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n  - name: root\n    sha256: "+auth.HashToken(root)+"\n    scopes: [\"admin:/\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSigners(t)
	keys, err := ParseJWKS(s.jwks)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Auth: store, OAuthKeys: keys})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := ts.client(kgo.SASL(oauth.Auth{Token: root}.AsMechanism()))
	if err := adm.Ping(ctx); err != nil {
		t.Fatalf("PicoMQ token over OAUTHBEARER: %v", err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	produce := func(token string) error {
		cl := ts.client(kgo.SASL(oauth.Auth{Token: token}.AsMechanism()), kgo.RequestRetries(0),
			kgo.AllowAutoTopicCreation(), kgo.RecordRetries(2))
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "jwt", Value: []byte("v")}).FirstErr()
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "jwt", 1, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, ts.client(kgo.SASL(plain.Auth{User: "u", Pass: root}.AsMechanism()))); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic jwt with the PicoMQ token over PLAIN: %v %+v", err, resp)
	}
	for _, alg := range []string{"RS256", "ES256"} {
		if err := produce(s.sign(t, alg, fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"openid admin:/"}`, exp), nil)); err != nil {
			t.Errorf("%s token with admin:/: %v", alg, err)
		}
	}
	if err := produce(s.sign(t, "RS256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"read:/other/"}`, exp), nil)); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("token with read:/other/ produced: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for desc, tok := range map[string]string{
		"expired":     s.sign(t, "ES256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"admin:/"}`, time.Now().Add(-time.Minute).Unix()), nil),
		"forged":      s.sign(t, "RS256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"admin:/"}`, exp), other),
		"unsecured":   unsecuredJWT(`{"alg":"none"}`, fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"admin:/"}`, exp)),
		"no scope":    s.sign(t, "RS256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"openid profile"}`, exp), nil),
		"wrong alg":   strings.Replace(s.sign(t, "RS256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"admin:/"}`, exp), nil), b64([]byte(`{"alg":"RS256","kid":"r1","typ":"JWT"}`)), b64([]byte(`{"alg":"ES256","kid":"r1","typ":"JWT"}`)), 1),
		"unknown kid": strings.Replace(s.sign(t, "RS256", fmt.Sprintf(`{"sub":"svc","exp":%d,"scope":"admin:/"}`, exp), nil), b64([]byte(`{"alg":"RS256","kid":"r1","typ":"JWT"}`)), b64([]byte(`{"alg":"RS256","kid":"zz","typ":"JWT"}`)), 1),
	} {
		cl := ts.client(kgo.SASL(oauth.Auth{Token: tok}.AsMechanism()), kgo.RequestRetries(0))
		pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := cl.Ping(pctx)
		pcancel()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), `{"status":"invalid_token"}`) {
			t.Errorf("%s token: %v, want SASL_AUTHENTICATION_FAILED with invalid_token", desc, err)
		}
	}
}
