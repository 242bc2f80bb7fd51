package layers

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/PicoMQ/picomq"

// rules are the layering of docs/architecture.md on direct imports: storage
// and metadata never know about frontends, frontends reach storage only
// through the stream service, the service and the record framing know no
// frontend, the shared vocabulary and the clients stand alone.
var rules = []struct {
	from      string
	forbidden []string
	reason    string
	except    []string // allowed although under a forbidden prefix
}{
	{"wal", []string{"api", "kafka", "node", "tiering", "meta"}, "storage knows no frontend, wiring or sibling", nil},
	{"tiering", []string{"api", "kafka", "node", "wal", "meta"}, "storage knows no frontend, wiring or sibling", nil},
	{"meta", []string{"api", "kafka", "node", "wal", "tiering"}, "metadata knows no frontend, wiring or storage (but records the extents of tiering/extent, a leaf)", []string{"tiering/extent"}},
	{"api", []string{"wal", "tiering", "meta", "kafka"}, "frontends call the stream service only", nil},
	{"kafka", []string{"wal", "tiering", "meta", "api"}, "frontends call the stream service only", nil},
	{"node/stream", []string{"api", "kafka"}, "the stream service knows no frontend", nil},
	{"tiering/extent", []string{"api", "kafka", "node", "wal", "tiering/segment", "tiering/objstore", "tiering/cache", "meta", "sdk", "client", "auth", "cmd", "e2e", "record"}, "an extent is a leaf of the object vocabulary that meta records too", nil},
	{"record", []string{"api", "kafka", "node", "wal", "tiering", "meta", "sdk", "client", "auth", "cmd", "e2e"}, "the RecordBatch framing is a leaf every layer may import", nil},
	{"sdk", []string{"api", "kafka", "node", "wal", "tiering", "meta", "cmd", "e2e", "client"}, "the shared wire vocabulary imports no server or client package", nil},
	{"client", []string{"api", "kafka", "node", "wal", "tiering", "meta", "cmd", "e2e"}, "clients import no server package", nil},
	{"auth", []string{"api", "kafka", "node", "wal", "tiering", "meta", "client", "cmd"}, "the token checker knows no listener, storage or wiring", nil},
}

// rootOnly are the adapters that link a heavy third-party stack (etcd's
// server, the AWS SDK). Only the composition root opens them, so that the
// stream service and the frontends do not link those stacks: node (the
// package itself, not node/stream), cmd/, e2e/, the test helpers that start
// or open them, and test files anywhere. TestDepsThirdParty checks the
// transitive result.
var rootOnly = []struct {
	pkg    string
	reason string
}{
	{"meta/embedded", "the embedded etcd server brings etcd's server, raft and gRPC server"},
	{"tiering/objstore/s3", "the S3 adapter brings the AWS SDK"},
	{"tiering/objstore/storeurl", "opening a store by URL links every adapter, S3 included"},
}

// mayOpenAdapters reports whether p, a non-test package, may import a
// rootOnly package.
func mayOpenAdapters(p string) bool {
	if p == module+"/node" || under(p, "cmd") || under(p, "e2e") {
		return true
	}
	for _, helper := range []string{"meta/metatest", "tiering/objstore/objstoretest", "tiering/objstore/storeurl"} {
		if under(p, helper) {
			return true
		}
	}
	for _, r := range rootOnly {
		if under(p, r.pkg) {
			return true
		}
	}
	return false
}

func under(p, dir string) bool {
	full := module + "/" + dir
	return p == full || strings.HasPrefix(p, full+"/")
}

// TestDepsImportRules lists the module's packages with `go list` (which
// reads sources and builds nothing) and checks every direct import,
// test imports included: test files of storage packages may use test
// helpers, but never frontends.
func TestDepsImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		checked++
		imports := append(append(append([]string{}, p.Imports...), p.TestImports...), p.XTestImports...)
		for _, r := range rules {
			if !under(p.ImportPath, r.from) {
				continue
			}
			for _, imp := range imports {
				for _, f := range r.forbidden {
					if under(imp, f) && !slices.ContainsFunc(r.except, func(e string) bool { return under(imp, e) }) {
						t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.reason)
					}
				}
			}
		}
		if !mayOpenAdapters(p.ImportPath) {
			for _, imp := range p.Imports {
				for _, r := range rootOnly {
					if under(imp, r.pkg) {
						t.Errorf("%s imports %s: only the composition root (node, cmd, e2e, tests) may: %s", p.ImportPath, imp, r.reason)
					}
				}
			}
		}
		// Only cmd/ and e2e/ wire a node (node's own packages aside).
		if !under(p.ImportPath, "cmd") && !under(p.ImportPath, "e2e") && !under(p.ImportPath, "node") {
			for _, imp := range imports {
				if imp == module+"/node" {
					t.Errorf("%s imports %s: only cmd/ and e2e/ wire a node", p.ImportPath, imp)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list returned only %d packages; the rule check would prove nothing", checked)
	}
}
