package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestRustCrateHasEveryWireName: the Rust client's picomq-protocol crate
// (client/rust/picomq-protocol/src) mirrors this package. Every string
// constant declared here — header names, query parameters, media types,
// error codes, event names — must appear as a `pub const` value there, so
// a name added or renamed on the Go side fails this test until the Rust
// crate follows.
func TestRustCrateHasEveryWireName(t *testing.T) {
	goValues := map[string]string{} // value -> Go name
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, err := strconv.Unquote(lit.Value)
							if err != nil {
								t.Fatal(err)
							}
							goValues[s] = vs.Names[i].Name
						}
					}
				}
			}
		}
	}
	if len(goValues) < 50 {
		t.Fatalf("found only %d string constants in sdk/wire", len(goValues))
	}
	rustValues := map[string]bool{}
	re := regexp.MustCompile(`pub const [A-Z0-9_]+: &str = "([^"]*)";`)
	dir := "../../client/rust/picomq-protocol/src/"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(dir + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			rustValues[m[1]] = true
		}
	}
	var missing []string
	for v, name := range goValues {
		if !rustValues[v] {
			missing = append(missing, name+" = "+strconv.Quote(v))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("picomq-protocol lacks %d wire names of sdk/wire:\n%s", len(missing), strings.Join(missing, "\n"))
	}
}
