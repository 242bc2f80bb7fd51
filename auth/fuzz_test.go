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
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := parse(b)
		if err != nil {
			return
		}
		if len(set.users) == 0 || len(set.users) != len(set.hashes) {
			t.Fatalf("accepted a file with %d tokens and %d hashes", len(set.users), len(set.hashes))
		}
		for _, p := range set.users {
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
