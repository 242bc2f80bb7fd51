package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/PicoMQ/picomq"

// TestImportRules enforces the layering of DESIGN.md §2 on direct imports:
// storage and metadata never know about frontends, frontends reach storage
// only through the stream service, the SDK stands alone, and only cmd/ and
// e2e/ import the wiring package node.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	type pkg struct {
		ImportPath                         string
		Imports, TestImports, XTestImports []string
	}
	under := func(p, dir string) bool {
		full := module + "/" + dir
		return p == full || strings.HasPrefix(p, full+"/")
	}
	rules := []struct {
		from      string
		forbidden []string
		reason    string
	}{
		{"wal", []string{"api", "kafka", "node", "tiering", "meta"}, "storage knows no frontend, wiring or sibling"},
		{"tiering", []string{"api", "kafka", "node", "wal", "meta"}, "storage knows no frontend, wiring or sibling"},
		{"meta", []string{"api", "kafka", "node", "wal", "tiering"}, "metadata knows no frontend, wiring or storage"},
		{"api", []string{"wal", "tiering", "meta", "kafka"}, "frontends call the stream service only"},
		{"kafka", []string{"wal", "tiering", "meta", "api"}, "frontends call the stream service only"},
		{"sdk", []string{"api", "kafka", "node", "wal", "tiering", "meta", "cmd", "e2e", "client"}, "the shared wire vocabulary imports no server or client package"},
		{"client", []string{"api", "kafka", "node", "wal", "tiering", "meta", "cmd", "e2e"}, "clients import no server package"},
		{"auth", []string{"api", "kafka", "node", "wal", "tiering", "meta", "client", "cmd"}, "the token checker knows no listener, storage or wiring"},
	}
	checked := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		checked++
		// Test files of storage packages may use test helpers, but never
		// frontends; so apply the rules to all imports alike.
		imports := append(append(append([]string{}, p.Imports...), p.TestImports...), p.XTestImports...)
		for _, r := range rules {
			if !under(p.ImportPath, r.from) {
				continue
			}
			for _, imp := range imports {
				for _, f := range r.forbidden {
					if under(imp, f) {
						t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.reason)
					}
				}
			}
		}
		// Only cmd/ and e2e/ may import the wiring package itself.
		if !under(p.ImportPath, "cmd") && !under(p.ImportPath, "e2e") && !under(p.ImportPath, "node") {
			for _, imp := range imports {
				if imp == module+"/node" {
					t.Errorf("%s imports %s: only cmd/ and e2e/ wire a node", p.ImportPath, imp)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("go list returned only %d packages; the rule check would prove nothing", checked)
	}
}
