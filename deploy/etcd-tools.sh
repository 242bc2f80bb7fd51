#!/usr/bin/env bash
# etcdutl, the etcd release's offline tool, for the restore drill
# (e2e TestEtcdRestoreDrill; docs/operations.md, "Restore etcd"). On the
# etcd instances it comes with the release tarball; here it is built from
# the Go module proxy into the tool cache, at the version of the etcd the
# module graph and the Terraform module use:
#
#   deploy/etcd-tools.sh build   build etcdutl if missing (~3 min cold, 2 cores)
#   deploy/etcd-tools.sh bin     print its path
#
# Settings: PICOMQ_TOOLS (tool cache, default ~/.cache/picomq-tools),
# PICOMQ_ETCDUTL_BIN (use this binary instead).
#
# etcdutl's go.mod has replace directives, so `go install etcdutl@v` is
# refused; a throwaway wrapper module that requires it builds it instead.
set -euo pipefail

ETCD_VERSION=v3.6.16
TOOLS="${PICOMQ_TOOLS:-$HOME/.cache/picomq-tools}"
ETCDUTL_BIN="${PICOMQ_ETCDUTL_BIN:-$TOOLS/etcdutl-$ETCD_VERSION/etcdutl}"

case "${1:-}" in
bin) echo "$ETCDUTL_BIN" ;;
build)
  [ -x "$ETCDUTL_BIN" ] && exit 0
  echo "etcd-tools: building etcdutl $ETCD_VERSION into $(dirname "$ETCDUTL_BIN")" >&2
  dir="$(dirname "$ETCDUTL_BIN")/wrap"
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/go.mod" <<MOD
module picomq.local/etcdutl

go 1.26.0

require go.etcd.io/etcd/etcdutl/v3 $ETCD_VERSION
MOD
  printf 'package main\n\nimport _ "go.etcd.io/etcd/etcdutl/v3"\n\nfunc main() {}\n' >"$dir/tools.go"
  (cd "$dir" && GOFLAGS= go mod tidy && GOFLAGS= go build -o "$ETCDUTL_BIN.tmp" go.etcd.io/etcd/etcdutl/v3)
  mv "$ETCDUTL_BIN.tmp" "$ETCDUTL_BIN"
  rm -rf "$dir"
  ;;
*)
  echo "usage: deploy/etcd-tools.sh build|bin" >&2
  exit 2
  ;;
esac
