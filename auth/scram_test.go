package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// scramClient is a minimal RFC 5802 client, to drive the server side.
type scramClient struct {
	m                    ScramMechanism
	user, pass, cnonce   string
	gs2, clientFirstBare string
	finalPrefix          string // sent before the server nonce (librdkafka)
	serverSig            []byte
}

func (c *scramClient) first() []byte {
	if c.gs2 == "" {
		c.gs2 = "n,,"
	}
	c.clientFirstBare = "n=" + strings.NewReplacer("=", "=3D", ",", "=2C").Replace(c.user) + ",r=" + c.cnonce
	return []byte(c.gs2 + c.clientFirstBare)
}

func (c *scramClient) final(t testing.TB, serverFirst []byte) []byte {
	t.Helper()
	attrs := strings.Split(string(serverFirst), ",")
	if len(attrs) != 3 {
		t.Fatalf("server-first %q", serverFirst)
	}
	nonce := strings.TrimPrefix(attrs[0], "r=")
	if !strings.HasPrefix(nonce, c.cnonce) || len(nonce) <= len(c.cnonce) {
		t.Fatalf("server nonce %q does not extend the client's %q", nonce, c.cnonce)
	}
	salt, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(attrs[1], "s="))
	if err != nil {
		t.Fatal(err)
	}
	var iter int
	for _, ch := range strings.TrimPrefix(attrs[2], "i=") {
		iter = iter*10 + int(ch-'0')
	}
	salted, err := c.m.Hi(c.pass, salt, iter)
	if err != nil {
		t.Fatal(err)
	}
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2)) + ",r=" + c.finalPrefix + nonce
	authMessage := []byte(c.clientFirstBare + "," + string(serverFirst) + "," + withoutProof)
	clientKey := c.m.hmac(salted, []byte("Client Key"))
	h := c.m.newHash()
	h.Write(clientKey)
	sig := c.m.hmac(h.Sum(nil), authMessage)
	proof := make([]byte, len(sig))
	subtle.XORBytes(proof, clientKey, sig)
	c.serverSig = c.m.hmac(c.m.hmac(salted, []byte("Server Key")), authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))
}

func lookupOf(user string, cred ScramCredential) ScramLookup {
	return func(u string) (ScramCredential, bool, error) {
		if u != user {
			return ScramCredential{}, false, nil
		}
		return cred, true, nil
	}
}

// TestScramRFC7677Vector replays RFC 7677 section 3's SCRAM-SHA-256
// example: the server must accept its proof and answer its signature.
func TestScramRFC7677Vector(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	salted, err := ScramSHA256.Hi("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := ScramSHA256.CredentialFromSalted(salted, salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	old := scramServerNonce
	scramServerNonce = func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" }
	defer func() { scramServerNonce = old }()
	conv, serverFirst, err := ScramSHA256.StartScram([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"), lookupOf("user", cred))
	if err != nil {
		t.Fatal(err)
	}
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; string(serverFirst) != want {
		t.Fatalf("server-first %q, want %q", serverFirst, want)
	}
	serverFinal, err := conv.Finish([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; string(serverFinal) != want {
		t.Fatalf("server-final %q, want %q", serverFinal, want)
	}
}

func TestScramLogin(t *testing.T) {
	for _, m := range ScramMechanisms {
		t.Run(m.Name, func(t *testing.T) {
			cred, err := m.NewCredential("s3cret", 4096)
			if err != nil {
				t.Fatal(err)
			}
			run := func(user, pass string) error {
				c := &scramClient{m: m, user: user, pass: pass, cnonce: "fyko+d2lbbFgONRv9qkxdawL"}
				conv, sf, err := m.StartScram(c.first(), lookupOf("al,i=ce", cred))
				if err != nil {
					return err
				}
				fin, err := conv.Finish(c.final(t, sf))
				if err != nil {
					return err
				}
				if !hmac.Equal(fin, []byte("v="+base64.StdEncoding.EncodeToString(c.serverSig))) {
					t.Fatalf("server signature %q does not match the client's", fin)
				}
				return nil
			}
			if err := run("al,i=ce", "s3cret"); err != nil {
				t.Fatalf("right password: %v", err)
			}
			if err := run("al,i=ce", "wrong"); !errors.Is(err, ErrScramAuth) {
				t.Fatalf("wrong password: %v, want ErrScramAuth", err)
			}
			if err := run("bob", "s3cret"); !errors.Is(err, ErrScramAuth) {
				t.Fatalf("unknown user: %v, want ErrScramAuth", err)
			}
		})
	}
}

// TestScramUnknownUserSaltStable: the salt offered for a user without a
// credential does not change between attempts (it would reveal that the
// user does not exist).
func TestScramUnknownUserSaltStable(t *testing.T) {
	none := func(string) (ScramCredential, bool, error) { return ScramCredential{}, false, nil }
	salt := func() string {
		_, sf, err := ScramSHA512.StartScram([]byte("n,,n=ghost,r=abc"), none)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(sf), ",")[1]
	}
	if a, b := salt(), salt(); a != b {
		t.Fatalf("salts %q and %q differ", a, b)
	}
}

func TestScramRefusesMalformed(t *testing.T) {
	cred, _ := ScramSHA256.NewCredential("p", 4096)
	for _, first := range []string{
		"", "n", "n,", "x,,n=u,r=a", "p=tls-unique,,n=u,r=a", "n,,r=a,n=u", "n,,n=,r=a", "n,,n=u,r=",
		"n,,m=ext,n=u,r=a", "n,,n=u=x,r=a", "n,a=other,n=u,r=a", "n,,n=u,r=a,tokenauth=true", "n,,n=u\x00,r=a",
		"n,,n=u,r=a,b",
	} {
		if _, _, err := ScramSHA256.StartScram([]byte(first), lookupOf("u", cred)); err == nil {
			t.Errorf("client-first %q accepted", first)
		}
	}
	c := &scramClient{m: ScramSHA256, user: "u", pass: "p", cnonce: "nonce"}
	for _, mangle := range []func(string) string{
		func(s string) string { return strings.Replace(s, "c=biws", "c=eSws", 1) },    // y,, not n,,
		func(s string) string { return strings.Replace(s, "r=nonce", "r=nonceX", 1) }, // other nonce
		func(s string) string { return s[:strings.LastIndex(s, ",p=")] },              // no proof
		func(s string) string { return s[:strings.LastIndex(s, ",p=")] + ",p=!!" },    // not base64
		func(s string) string { return s[:strings.LastIndex(s, ",p=")] + ",p=AAAA" },  // short proof
		func(s string) string { return strings.Replace(s, "c=biws,", "", 1) },         // no c=
	} {
		conv, sf, err := ScramSHA256.StartScram(c.first(), lookupOf("u", cred))
		if err != nil {
			t.Fatal(err)
		}
		bad := mangle(string(c.final(t, sf)))
		if _, err := conv.Finish([]byte(bad)); err == nil {
			t.Errorf("client-final %q accepted", bad)
		}
	}
	// librdkafka puts its own nonce in front of the server's whole nonce;
	// Kafka accepts that (the server's fresh part is still there).
	lib := &scramClient{m: ScramSHA256, user: "u", pass: "p", cnonce: "nonce", finalPrefix: "nonce"}
	conv, sf, _ := ScramSHA256.StartScram(lib.first(), lookupOf("u", cred))
	if _, err := conv.Finish(lib.final(t, sf)); err != nil {
		t.Fatalf("librdkafka's nonce: %v", err)
	}
	// A conversation finishes once.
	conv, sf, _ = ScramSHA256.StartScram(c.first(), lookupOf("u", cred))
	fin := c.final(t, sf)
	if _, err := conv.Finish(fin); err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Finish(fin); err == nil {
		t.Error("a second Finish succeeded")
	}
}

func TestScramCredentialBounds(t *testing.T) {
	for _, it := range []int{0, 4095, 16385} {
		if _, err := ScramSHA256.CredentialFromSalted(bytes.Repeat([]byte{1}, 32), []byte("salt"), it); err == nil {
			t.Errorf("iterations %d accepted", it)
		}
	}
	if _, err := ScramSHA256.CredentialFromSalted(nil, []byte("salt"), 4096); err == nil {
		t.Error("empty salted password accepted")
	}
	if _, err := ScramSHA256.CredentialFromSalted([]byte{1}, nil, 4096); err == nil {
		t.Error("empty salt accepted")
	}
}

func TestScramUserScopes(t *testing.T) {
	set, err := parse([]byte("tokens:\n  - {name: t, sha256: " + HashToken("x") + ", scopes: [admin:/]}\nusers:\n  - {name: alice, scopes: [write:/orders/]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{}
	s.cur.Store(set)
	p, err := s.ScramUser("alice")
	if err != nil || !p.Allows(Write, "/orders/1") || p.Allows(Read, "/orders/1") {
		t.Fatalf("alice: %+v, %v", p, err)
	}
	if _, err := s.ScramUser("bob"); !errors.Is(err, ErrNoScopes) {
		t.Fatalf("bob: %v, want ErrNoScopes", err)
	}
	for _, bad := range []string{
		"users:\n  - {name: a, scopes: []}\n",
		"users:\n  - {name: '', scopes: [read:/]}\n",
		"users:\n  - {name: a, scopes: [read:/]}\n  - {name: a, scopes: [read:/]}\n",
		"users:\n  - {name: a, scopes: [read:/], password: x}\n",
	} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// BenchmarkScramLogin is the server's cost of one SCRAM-SHA-512 login
// (both messages; the client's PBKDF2 is not the server's work).
func BenchmarkScramLogin(b *testing.B) {
	cred, err := ScramSHA512.NewCredential("pw", 4096)
	if err != nil {
		b.Fatal(err)
	}
	c := &scramClient{m: ScramSHA512, user: "u", pass: "pw", cnonce: "benchnonce"}
	conv, sf, err := ScramSHA512.StartScram(c.first(), lookupOf("u", cred))
	if err != nil {
		b.Fatal(err)
	}
	final := c.final(b, sf) // computed once: PBKDF2 is the client's cost
	_ = conv
	old := scramServerNonce
	fixed := strings.TrimPrefix(strings.Split(string(sf), ",")[0], "r=benchnonce")
	scramServerNonce = func() string { return fixed }
	defer func() { scramServerNonce = old }()
	b.ResetTimer()
	for b.Loop() {
		conv, _, err := ScramSHA512.StartScram(c.first(), lookupOf("u", cred))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conv.Finish(final); err != nil {
			b.Fatal(err)
		}
	}
}
