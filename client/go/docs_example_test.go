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
// as a program in a module of its own that requires only this one (what a
// user gets from `go get github.com/PicoMQ/picomq/client/go`), against the
// node on the documented address that TestMain started. The program's
// module graph and its packages hold none of the server's dependencies.
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
	dir := userModule(t)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	checkClientOnlyGraph(t, dir)
	// A fresh stream: the example creates it and reads from the beginning.
	if err := newClient(t, picomq.ProtocolPico, picoURL).Stream("/orders/1042").Delete(context.Background()); err != nil && !picomq.IsKind(err, picomq.KindNotFound) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := goCmd(ctx, dir, "run", ".").CombinedOutput()
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

// userModule writes the go.mod and go.sum of a user's module that requires
// only the client module and returns its directory. The client's own
// requirements come from the repository, as they would from a release of
// it: replace directives of a dependency do not apply to its users.
func userModule(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module docexample\n\ngo 1.26.0\n\nrequire github.com/PicoMQ/picomq/client/go v0.0.0\n\nreplace (\n" +
		"\tgithub.com/PicoMQ/picomq/client/go => " + filepath.Join(root, "client/go") + "\n" +
		"\tgithub.com/PicoMQ/picomq/sdk => " + filepath.Join(root, "sdk") + "\n" +
		"\tgithub.com/PicoMQ/picomq/internal/testproc => " + filepath.Join(root, "internal/testproc") + "\n)\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// serverDeps are module path prefixes a client user must never get: the
// server module itself and the stacks only the server needs.
var serverDeps = []string{
	"github.com/PicoMQ/picomq ", "github.com/PicoMQ/picomq@",
	"go.etcd.io/", "google.golang.org/grpc", "github.com/aws/",
}

// checkClientOnlyGraph fails when the module graph (go mod graph) or the
// packages (go list -deps) of the user's module in dir name a server
// dependency.
func checkClientOnlyGraph(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"mod", "graph"}, {"list", "-deps", "."}} {
		out, err := goCmd(ctx, dir, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "github.com/PicoMQ/picomq/client/go") {
			t.Fatalf("go %s does not list the client module:\n%s", strings.Join(args, " "), out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, bad := range serverDeps {
				if strings.Contains(line+" ", bad) {
					t.Errorf("go %s of a program that requires only the client lists %q: %s", strings.Join(args, " "), strings.TrimSpace(bad), line)
				}
			}
		}
	}
}

// goCmd is the go command in the user's module dir, offline: everything
// it needs is in the module cache or the repository.
func goCmd(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	return cmd
}
