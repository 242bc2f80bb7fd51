#!/usr/bin/env bash
# etcdutl and etcdctl, the etcd release's command-line tools, for the
# restore drill (e2e TestEtcdRestoreDrill) and the backup script's test
# (terraform/tests TestEtcdBackupScript); docs/operations.md, "Restore
# etcd". On the etcd instances they come with the release tarball; here
# they are built from the Go module proxy into the tool cache, at the
# version of the etcd the module graph uses:
#
#   deploy/etcd-tools.sh build     build both if missing (~4 min cold, 2 cores)
#   deploy/etcd-tools.sh bin       print etcdutl's path
#   deploy/etcd-tools.sh etcdctl   print etcdctl's path
#
# Settings: PICOMQ_TOOLS (tool cache, default ~/.cache/picomq-tools),
# PICOMQ_ETCDUTL_BIN / PICOMQ_ETCDCTL_BIN (use these binaries instead).
#
# Their go.mod files have replace directives, so `go install …@v` is
# refused; a throwaway wrapper module that requires them builds them.
set -euo pipefail

ETCD_VERSION=v3.6.16
TOOLS="${PICOMQ_TOOLS:-$HOME/.cache/picomq-tools}"
ETCDUTL_BIN="${PICOMQ_ETCDUTL_BIN:-$TOOLS/etcd-$ETCD_VERSION/etcdutl}"
ETCDCTL_BIN="${PICOMQ_ETCDCTL_BIN:-$TOOLS/etcd-$ETCD_VERSION/etcdctl}"

build() {
  [ -x "$ETCDUTL_BIN" ] && [ -x "$ETCDCTL_BIN" ] && return 0
  echo "etcd-tools: building etcdutl and etcdctl $ETCD_VERSION into $(dirname "$ETCDUTL_BIN")" >&2
  local dir
  dir="$(dirname "$ETCDUTL_BIN")/wrap"
  rm -rf "$dir" && mkdir -p "$dir" "$(dirname "$ETCDCTL_BIN")"
  cat >"$dir/go.mod" <<MOD
module picomq.local/etcdtools

go 1.26.0

require (
	go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION
	go.etcd.io/etcd/etcdutl/v3 $ETCD_VERSION
)
MOD
  printf 'package main\n\nimport (\n\t_ "go.etcd.io/etcd/etcdctl/v3"\n\t_ "go.etcd.io/etcd/etcdutl/v3"\n)\n\nfunc main() {}\n' >"$dir/tools.go"
  (cd "$dir" && GOFLAGS= go mod tidy &&
    GOFLAGS= go build -o "$ETCDUTL_BIN.tmp" go.etcd.io/etcd/etcdutl/v3 &&
    GOFLAGS= go build -o "$ETCDCTL_BIN.tmp" go.etcd.io/etcd/etcdctl/v3)
  mv "$ETCDUTL_BIN.tmp" "$ETCDUTL_BIN"
  mv "$ETCDCTL_BIN.tmp" "$ETCDCTL_BIN"
  rm -rf "$dir"
}

case "${1:-}" in
bin) echo "$ETCDUTL_BIN" ;;
etcdctl) echo "$ETCDCTL_BIN" ;;
build) build ;;
*)
  echo "usage: deploy/etcd-tools.sh build|bin|etcdctl" >&2
  exit 2
  ;;
esac
