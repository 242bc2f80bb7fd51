package auth

import (
	"strings"
	"testing"
)

// FuzzParseTokenFile: any bytes give a token set or an error, never a
// panic; whatever is accepted has named tokens with well-formed scopes.
func FuzzParseTokenFile(f *testing.F) {
	f.Add([]byte("tokens:\n  - name: a\n    sha256: " + HashToken("x") + "\n    scopes: [read:/orders/, admin:/]\n    rate: 5\n    burst: 10\n"))
	f.Add([]byte("tokens: []\n"))
	f.Add([]byte("tokens:\n  - {name: a, sha256: zz, scopes: [read:/]}\n"))
	f.Add([]byte("&a [*a, *a]"))
	f.Add([]byte("users:\n  - {name: alice, scopes: [write:/orders/], rate: 2}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := parse(b)
		if err != nil {
			return
		}
		if len(set.users)+len(set.scram) == 0 || len(set.users) != len(set.hashes) {
			t.Fatalf("accepted a file with %d tokens, %d users and %d hashes", len(set.users), len(set.scram), len(set.hashes))
		}
		for _, p := range set.all() {
			if p.Name == "" || len(p.Scopes) == 0 {
				t.Fatalf("accepted token %+v without a name or scopes", p)
			}
			for _, s := range p.Scopes {
				if !strings.HasPrefix(s.Prefix, "/") || (s.Level != Read && s.Level != Write && s.Level != Admin) {
					t.Fatalf("accepted scope %+v", s)
				}
			}
		}
	})
}

// FuzzParseScope: accepted scopes print back to themselves, and a scope
// never covers a name outside its prefix.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"read:/", "write:/orders/", "admin:/a", "read:", "read", ":/", "admin:/\x00"} {
		f.Add(s, "/orders/1")
	}
	f.Fuzz(func(t *testing.T, s, name string) {
		sc, err := ParseScope(s)
		if err != nil {
			return
		}
		if sc.String() != s {
			t.Fatalf("%q parsed as %q", s, sc)
		}
		for _, lv := range []Level{Read, Write, Admin} {
			if sc.covers(lv, name) && !strings.HasPrefix(name, sc.Prefix) {
				t.Fatalf("%q covers %q", s, name)
			}
		}
	})
}

// FuzzScramMessages: any client-first and client-final bytes give an
// error or a conversation, never a panic; a login succeeds only with the
// proof of the stored credential, which random bytes do not carry.
func FuzzScramMessages(f *testing.F) {
	f.Add([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"), []byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	f.Add([]byte("y,a=user,n=user,r=abc,ext=1"), []byte("c=eSxhPXVzZXIs,r=abc,p=AAAA"))
	f.Add([]byte("n,,n=us=2Cer=3D,r=x"), []byte("c=biws,r=x,p="))
	f.Add([]byte("p=tls-unique,,n=u,r=a"), []byte(""))
	cred, err := ScramSHA256.NewCredential("pencil", 4096)
	if err != nil {
		f.Fatal(err)
	}
	lookup := func(string) (ScramCredential, bool, error) { return cred, true, nil }
	f.Fuzz(func(t *testing.T, first, final []byte) {
		if _, err := ParseScramClientFinal(final); err == nil && len(final) == 0 {
			t.Fatal("empty client-final parsed")
		}
		conv, sf, err := ScramSHA256.StartScram(first, lookup)
		if err != nil {
			return
		}
		cf, _ := ParseScramClientFirst(first)
		if !strings.HasPrefix(string(sf), "r="+cf.Nonce) || conv.User() == "" {
			t.Fatalf("server-first %q for %q", sf, first)
		}
		if _, err := conv.Finish(final); err == nil {
			t.Fatalf("random client-final %q logged in", final)
		}
	})
}
