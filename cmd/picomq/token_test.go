package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/auth"
)

// TestTokenNew: `picomq token new` prints a token and an entry that, in a
// token file, authenticates exactly that token with the given scopes.
func TestTokenNew(t *testing.T) {
	var out, errb bytes.Buffer
	if code := tokenCmd([]string{"new", "--name", "ingest", "--scope", "write:/orders/", "--rate", "5"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.SplitN(out.String(), "\n", 3)
	token := strings.TrimPrefix(lines[1], "# ")
	if !strings.HasPrefix(token, "pmq_") || strings.Contains(lines[2], token) {
		t.Fatalf("token line %q; the entry must hold only the hash:\n%s", lines[1], lines[2])
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n"+lines[2]), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(token)
	if err != nil || p.Name != "ingest" || !p.Allows(auth.Write, "/orders/1") || p.Allows(auth.Read, "/orders/1") {
		t.Fatalf("principal %+v, err %v", p, err)
	}
	var hashOut bytes.Buffer
	tokenCmd([]string{"hash"}, strings.NewReader(token+"\n"), &hashOut, &errb)
	if strings.TrimSpace(hashOut.String()) != auth.HashToken(token) {
		t.Fatalf("token hash = %q", hashOut.String())
	}
	if code := tokenCmd([]string{"new", "--name", "x", "--scope", "delete:/"}, nil, &out, &errb); code != 2 {
		t.Fatalf("bad scope: exit %d", code)
	}
}
