package layers

import (
	"bufio"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// lean are the packages whose transitive dependencies (go list -deps, tests
// excluded) are ruled: the frontends, the stream service and the Go client.
// They must never link etcd (server or client), gRPC or the AWS SDK, and no
// third-party module that allowed does not list for them.
var lean = []string{"api/pico", "api/ds", "kafka", "node/stream", "client/go"}

// banned are module path prefixes no lean package may depend on, whatever
// allowed says: the stacks only the composition root needs.
var banned = []struct{ prefix, reason string }{
	{"go.etcd.io/etcd/server/", "etcd's server (raft, bbolt, a gRPC server) runs only in meta/embedded, opened by node"},
	{"go.etcd.io/etcd/", "etcd's client is linked only by meta, which node wires in; the stream service takes the record types from meta/metadata and the lease as a metadata.Lease"},
	{"google.golang.org/grpc", "gRPC comes with etcd's client (meta) and server (meta/embedded), which only node links"},
	{"github.com/grpc-ecosystem/", "grpc-gateway comes with etcd's client (meta), which only node links"},
	{"go.etcd.io/raft/", "etcd's server (raft) runs only in meta/embedded, opened by node"},
	{"go.etcd.io/bbolt", "etcd's server (bbolt) runs only in meta/embedded, opened by node"},
	{"github.com/aws/", "the AWS SDK is linked only by tiering/objstore/s3, opened by node"},
}

// server are the lean packages of the server module; client/go gets less.
var server = []string{"api/pico", "api/ds", "kafka", "node/stream"}

// allowed are the third-party modules lean packages may depend on, each
// with why, and which lean packages may (for lists the package and
// everything that imports it, e.g. node/stream's modules are allowed for
// the frontends above it).
var allowed = []struct {
	module string
	reason string
	for_   []string
}{
	{"golang.org/x/net", "http/httpguts, the RFC 9110 header rules of the Go client and the HTTP fast path (idna with it)", lean},
	{"github.com/cenkalti/backoff/v5", "the one backoff rule of every retry loop (sdk/retry); no dependencies of its own", lean},
	{"golang.org/x/text", "Unicode tables behind golang.org/x/net/idna", lean},
	{"golang.org/x/sys", "unix, the WAL's file calls (through node/stream)", server},
	{"golang.org/x/time", "rate, the per-token request limit of auth, which the Kafka frontend uses", []string{"kafka"}},
	{"github.com/klauspost/compress", "zstd, snappy and gzip of RecordBatch compression (record)", server},
	{"github.com/pierrec/lz4/v4", "lz4 of RecordBatch compression (record)", server},
	{"github.com/cespare/xxhash/v2", "hashing of the block cache (ristretto) and of Prometheus", server},
	{"github.com/dgraph-io/ristretto/v2", "the block cache of object reads (tiering/cache)", server},
	{"github.com/dustin/go-humanize", "needed by ristretto's metrics", server},
	{"github.com/prometheus/client_golang", "metrics", server},
	{"github.com/prometheus/client_model", "metrics (client_golang)", server},
	{"github.com/prometheus/common", "metrics (client_golang)", server},
	{"github.com/prometheus/procfs", "metrics (client_golang's process collector)", server},
	{"github.com/beorn7/perks", "metrics (client_golang's summaries)", server},
	{"github.com/munnerz/goautoneg", "metrics (client_golang's content negotiation)", server},
	{"go.yaml.in/yaml/v2", "metrics (prometheus/common)", server},
	{"go.yaml.in/yaml/v3", "the token file of auth, which the Kafka frontend uses", []string{"kafka"}},
	{"github.com/twmb/franz-go", "kerr, the Kafka error codes of the Kafka frontend; kgo, its client to other nodes for transaction markers (WriteTxnMarkers)", []string{"kafka"}},
	{"github.com/twmb/franz-go/pkg/kmsg", "the Kafka frontend's wire messages", []string{"kafka"}},
	{"google.golang.org/protobuf", "protowire, the encoding of stream records (meta/metadata/record.go)", server},
}

// ownModule reports whether module is one of this repository's.
func ownModule(m string) bool { return m == module || strings.HasPrefix(m, module+"/") }

// TestDepsThirdParty checks the modules every lean package links
// (go list -deps, which reads sources and builds nothing), and that every
// allowed entry is still needed, so the list shrinks when a dependency goes.
func TestDepsThirdParty(t *testing.T) {
	used := map[string]bool{}
	for _, pkg := range lean {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{end}}", module+"/"+pkg)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		n := 0
		for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
			imp, mod, _ := strings.Cut(sc.Text(), " ")
			n++
			if mod == "" || ownModule(mod) {
				continue // the standard library, or this repository
			}
			if b := slices.IndexFunc(banned, func(b struct{ prefix, reason string }) bool { return strings.HasPrefix(mod, b.prefix) }); b >= 0 {
				t.Errorf("%s depends on %s (module %s): %s", pkg, imp, mod, banned[b].reason)
				continue // banned outright: no allow-list entry can allow it
			}
			i := slices.IndexFunc(allowed, func(a struct {
				module string
				reason string
				for_   []string
			}) bool {
				return a.module == mod
			})
			switch {
			case i < 0:
				t.Errorf("%s depends on %s of module %s, which is not in the allow-list of internal/layers/deps_test.go (add it there with a reason, or drop the dependency)", pkg, imp, mod)
			case !slices.Contains(allowed[i].for_, pkg):
				t.Errorf("%s depends on %s of module %s, allowed only for %v (%s)", pkg, imp, mod, allowed[i].for_, allowed[i].reason)
			default:
				used[mod] = true
			}
		}
		if n < 10 {
			t.Fatalf("go list -deps %s listed %d packages; the check would prove nothing", pkg, n)
		}
	}
	for _, a := range allowed {
		if !used[a.module] {
			t.Errorf("allow-list entry %s (%s) is not needed by any of %v any more: remove it", a.module, a.reason, lean)
		}
	}
}
