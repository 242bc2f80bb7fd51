package picomq_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// TestDocsUsageExample compiles and runs the usage example of
// docs/sdk-go.md exactly as the document shows it, import line included,
// as a program in a module of its own that requires this one (what a user
// gets from `go get github.com/PicoMQ/picomq/client/go`), against the
// node on the documented address that TestMain started.
func TestDocsUsageExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sdk-go.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet := firstGoBlock(t, string(doc), `import picomq "github.com/PicoMQ/picomq/client/go"`)
	var imports, body []string
	for _, line := range strings.Split(snippet, "\n") {
		if strings.HasPrefix(line, "import ") {
			imports = append(imports, line)
		} else {
			body = append(body, "\t"+line)
		}
	}
	prog := "package main\n\n" + strings.Join(imports, "\n") + "\n" + `import (
	"context"
	"fmt"
	"os"
)

func main() {
	ctx := context.Background()
` + strings.Join(body, "\n") + `
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	last := page.Records[len(page.Records)-1]
	fmt.Printf("%s %s %s\n", ack.Start, last.Position, last.Body)
}
`
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module docexample\n\ngo 1.26.0\n\nrequire github.com/PicoMQ/picomq v0.0.0\n\nreplace github.com/PicoMQ/picomq => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(prog)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh stream: the example creates it and reads from the beginning.
	if err := newClient(t, picomq.ProtocolPico, picoURL).Stream("/orders/1042").Delete(context.Background()); err != nil && !picomq.IsKind(err, picomq.KindNotFound) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the documented example does not build or run: %v\n%s\nprogram:\n%s", err, out, prog)
	}
	if got, want := strings.TrimSpace(string(out)), `0 0 {"item":"widget"}`; got != want {
		t.Fatalf("example printed %q, want %q", got, want)
	}
	_ = newClient(t, picomq.ProtocolPico, picoURL).Stream("/orders/1042").Delete(context.Background())
}

// firstGoBlock returns the first ```go block of doc that contains marker.
func firstGoBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	for _, part := range strings.Split(doc, "```go\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if ok && strings.Contains(block, marker) {
			return strings.TrimRight(block, "\n")
		}
	}
	t.Fatalf("no go block containing %q", marker)
	return ""
}
