// Command etcd is a real etcd server (the version pinned in go.mod) for the
// multi-process e2e tests and deploy/local-cluster.sh. It exists because
// `go install` of etcd's own main package is refused (replace directives),
// while building its entry point from this module works. Test-only: nothing
// in PicoMQ imports it, and production clusters run their own etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
