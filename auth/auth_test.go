package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func entry(name, token string, rateLine string, scopes ...string) string {
	return "  - name: " + name + "\n    sha256: " + HashToken(token) + "\n    scopes: [" + strings.Join(scopes, ", ") + "]\n" + rateLine
}

func TestScopes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "tokens:\n"+
		entry("reader", "tok-r", "", "read:/orders/")+
		entry("writer", "tok-w", "", "write:/orders/")+
		entry("admin", "tok-a", "", "admin:/"))
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		token string
		level Level
		name  string
		want  bool
	}{
		{"tok-r", Read, "/orders/1", true},
		{"tok-r", Write, "/orders/1", false},
		{"tok-r", Read, "/payments/1", false},
		{"tok-r", Read, "/orders", false}, // the prefix is "/orders/"
		{"tok-w", Write, "/orders/1", true},
		{"tok-w", Read, "/orders/1", false}, // write does not include read
		{"tok-w", Admin, "/orders/1", false},
		{"tok-a", Read, "/x", true},
		{"tok-a", Write, "/x", true},
		{"tok-a", Admin, "/", true},
	}
	for _, c := range cases {
		p, err := s.Authenticate(c.token)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allows(c.level, c.name); got != c.want {
			t.Errorf("%s %s %s = %v, want %v", p.Name, c.level, c.name, got, c.want)
		}
	}
	if _, err := s.Authenticate(""); !errors.Is(err, ErrNoToken) {
		t.Errorf("empty token: %v", err)
	}
	if _, err := s.Authenticate("tok-x"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("unknown token: %v", err)
	}
	if _, err := s.Authenticate(HashToken("tok-r")); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("the stored hash must not work as a token: %v", err)
	}
}

// TestReload: a reload swaps the tokens in force; a broken file keeps the
// old ones.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "tokens:\n"+entry("a", "one", "", "read:/"))
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "tokens:\n"+entry("b", "two", "", "read:/"))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate("one"); err == nil {
		t.Fatal("revoked token still accepted")
	}
	if p, err := s.Authenticate("two"); err != nil || p.Name != "b" {
		t.Fatalf("new token: %v %v", p, err)
	}
	writeFile(t, path, "tokens: [")
	if err := s.Reload(); err == nil {
		t.Fatal("broken file reloaded without error")
	}
	if _, err := s.Authenticate("two"); err != nil {
		t.Fatalf("tokens in force lost on a failed reload: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "tokens:\n"+entry("slow", "s", "    rate: 2\n    burst: 2\n", "read:/"))
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Authenticate("s")
	now := time.Now()
	for i := range 2 {
		if ok, _ := p.Take(now); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	ok, wait := p.Take(now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("over the burst: ok=%v wait=%v, want refused with a wait of at most 1s", ok, wait)
	}
	if ok, _ := p.Take(now.Add(time.Second)); !ok {
		t.Fatal("refused after the bucket refilled")
	}
}

func TestParseErrors(t *testing.T) {
	h := HashToken("x")
	for _, bad := range []string{
		"",
		"tokens: []",
		"tokens:\n  - name: a\n    sha256: nothex\n    scopes: [read:/]\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: []\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read:orders]\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [delete:/]\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read:/]\n  - name: a\n    sha256: " + HashToken("y") + "\n    scopes: [read:/]\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read:/]\n  - name: b\n    sha256: " + h + "\n    scopes: [read:/]\n",
		"tokens:\n  - name: a\n    token: plain\n    scopes: [read:/]\n",
		"tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read:/]\n    rate: -1\n",
	} {
		if _, err := ParseFile([]byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}

// TestScrapeOnlyScope: "metrics" parses without a prefix, grants no stream
// level anywhere, and makes a token scrape-only only when it is the
// token's every scope.
func TestScrapeOnlyScope(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "tokens:\n"+
		entry("prometheus", "tok-p", "", "metrics")+
		entry("reader", "tok-r", "", "read:/orders/")+
		entry("both", "tok-b", "", "metrics", "read:/orders/"))
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"tok-p": true, "tok-r": false, "tok-b": false}
	for tok, scrapeOnly := range want {
		p, err := s.Authenticate(tok)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ScrapeOnly(); got != scrapeOnly {
			t.Errorf("%s: ScrapeOnly = %v, want %v", p.Name, got, scrapeOnly)
		}
	}
	p, _ := s.Authenticate("tok-p")
	for _, lv := range []Level{Read, Write, Admin} {
		for _, name := range []string{"/", "/orders/1", "", "/_sys/kafka/groups/g"} {
			if p.Allows(lv, name) {
				t.Errorf("metrics scope allows %s on %q", lv, name)
			}
		}
	}
	if got := p.Scopes[0].String(); got != "metrics" {
		t.Errorf("metrics scope prints as %q", got)
	}
	var nilP *Principal
	if nilP.ScrapeOnly() {
		t.Error("nil principal is scrape-only")
	}
	for _, bad := range []string{"metrics:/", "metrics:", "metric"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}
