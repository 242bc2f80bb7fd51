package kafka

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	"github.com/PicoMQ/picomq/auth"
)

// Signed JWTs for SASL OAUTHBEARER (Config.OAuthKeys).
//
// Why: an identity provider issues a client a JWT signed with a key
// whose public half it publishes as a JWK Set (RFC 7517); Kafka's
// OAUTHBEARER validator checks such tokens. With the set in a file a
// node accepts them next to its own bearer tokens, and the token's
// scope claim, in PicoMQ's scope syntax (write:/orders/), says what the
// client may do. RS256 and ES256 only: the algorithms identity providers
// sign with by default; HMAC would need the shared secret on every node.

// JWTKeys are the public keys signed OAUTHBEARER tokens are checked
// against, by key id.
type JWTKeys struct {
	byID map[string]crypto.PublicKey
	// only is the key a token without kid is checked against: the set's
	// one key (nil with several).
	only crypto.PublicKey
}

// LoadJWKS reads a JWK Set file (RFC 7517 §5: {"keys":[...]}).
func LoadJWKS(path string) (*JWTKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	k, err := ParseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", path, err)
	}
	return k, nil
}

// ParseJWKS decodes a JWK Set: RSA keys (kty RSA, n, e; at least 2048
// bits) and P-256 keys (kty EC, crv P-256, x, y). A key whose use is not
// "sig", or whose alg is neither RS256 nor ES256, is left out; a set
// without a usable key, two keys with one kid, or a malformed key is an
// error (a typo must not silently drop a key).
func ParseJWKS(b []byte) (*JWTKeys, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Use, Alg, N, E, Crv, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %v", err)
	}
	k := &JWTKeys{byID: map[string]crypto.PublicKey{}}
	n := 0
	for i, jk := range set.Keys {
		if (jk.Use != "" && jk.Use != "sig") || (jk.Alg != "" && jk.Alg != "RS256" && jk.Alg != "ES256") {
			continue
		}
		var pub crypto.PublicKey
		var err error
		switch jk.Kty {
		case "RSA":
			pub, err = rsaKey(jk.N, jk.E)
		case "EC":
			pub, err = ecKey(jk.Crv, jk.X, jk.Y)
		default:
			err = fmt.Errorf("kty %q (want RSA or EC)", jk.Kty)
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, jk.Kid, err)
		}
		if _, dup := k.byID[jk.Kid]; dup {
			return nil, fmt.Errorf("key %d: kid %q given twice", i, jk.Kid)
		}
		k.byID[jk.Kid] = pub
		k.only = pub
		n++
	}
	if n == 0 {
		return nil, errors.New("no RS256 or ES256 signing key")
	}
	if n > 1 {
		k.only = nil
	}
	return k, nil
}

func b64Int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%q is not an unpadded base64url integer", s)
	}
	return new(big.Int).SetBytes(b), nil
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nn, err := b64Int(n)
	if err != nil {
		return nil, fmt.Errorf("n: %w", err)
	}
	ee, err := b64Int(e)
	if err != nil {
		return nil, fmt.Errorf("e: %w", err)
	}
	if nn.BitLen() < 2048 || nn.BitLen() > 8192 {
		return nil, fmt.Errorf("RSA modulus of %d bits (want 2048 to 8192)", nn.BitLen())
	}
	if !ee.IsInt64() || ee.Int64() < 3 || ee.Int64() > 1<<31-1 || ee.Bit(0) == 0 {
		return nil, errors.New("RSA exponent out of range")
	}
	return &rsa.PublicKey{N: nn, E: int(ee.Int64())}, nil
}

func ecKey(crv, x, y string) (*ecdsa.PublicKey, error) {
	if crv != "P-256" {
		return nil, fmt.Errorf("crv %q (want P-256)", crv)
	}
	xx, err := b64Int(x)
	if err != nil {
		return nil, fmt.Errorf("x: %w", err)
	}
	yy, err := b64Int(y)
	if err != nil {
		return nil, fmt.Errorf("y: %w", err)
	}
	if xx.BitLen() > 256 || yy.BitLen() > 256 {
		return nil, errors.New("coordinate longer than 32 bytes")
	}
	// The uncompressed point form makes the standard library check that
	// the point is on the curve.
	point := append([]byte{4}, append(xx.FillBytes(make([]byte, 32)), yy.FillBytes(make([]byte, 32))...)...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, fmt.Errorf("not a P-256 point: %v", err)
	}
	return pub, nil
}

// verify checks the signature of a compact JWS (parts) whose header is
// header and algorithm alg.
func (k *JWTKeys) verify(header map[string]json.RawMessage, alg string, parts []string) error {
	pub := k.only
	if raw, ok := header["kid"]; ok {
		var kid string
		if err := json.Unmarshal(raw, &kid); err != nil {
			return invalidToken("header kid %s, want a string", raw)
		}
		if pub, ok = k.byID[kid]; !ok {
			return invalidToken("no key with kid %q", kid)
		}
	}
	if pub == nil {
		return invalidToken("no kid in the header and several keys")
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return invalidToken("signature is not unpadded base64url")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	switch key := pub.(type) {
	case *rsa.PublicKey:
		if alg != "RS256" {
			return invalidToken("alg %q with an RSA key (want RS256)", alg)
		}
		if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) != nil {
			return invalidToken("bad signature")
		}
	case *ecdsa.PublicKey:
		if alg != "ES256" {
			return invalidToken("alg %q with a P-256 key (want ES256)", alg)
		}
		if len(sig) != 64 { // RFC 7518 §3.4: R || S, 32 bytes each
			return invalidToken("ES256 signature of %d bytes (want 64)", len(sig))
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(key, sum[:], r, s) {
			return invalidToken("bad signature")
		}
	}
	return nil
}

// principal validates a signed token and returns its principal: named
// after sub, with the scope claim's words that are PicoMQ scopes (others,
// such as an identity provider's "openid", are ignored); a token that
// grants none is refused.
func (k *JWTKeys) principal(token string, now time.Time) (*auth.Principal, error) {
	c, err := parseJWT(token, now, k)
	if err != nil {
		return nil, err
	}
	p := &auth.Principal{Name: "jwt:" + c.Subject}
	for _, w := range c.Scopes {
		if sc, err := auth.ParseScope(w); err == nil {
			p.Scopes = append(p.Scopes, sc)
		}
	}
	if len(p.Scopes) == 0 {
		return nil, invalidToken("no PicoMQ scope (read:/… write:/… admin:/… metrics) in the scope claim %q", c.Scopes)
	}
	return p, nil
}
