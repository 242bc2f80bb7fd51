#!/usr/bin/env bash
# helm and promtool for the offline Kubernetes and monitoring checks
# (`make k8s-test`, part of `make test`). Both are Go modules; they build
# from the Go module proxy into the tool cache, outside the repository,
# the same way deploy/tf-tools.sh builds tofu and tflint:
#
#   deploy/k8s-tools.sh build      build both if missing (helm ~4 min, promtool ~5 min cold, 2 cores)
#   deploy/k8s-tools.sh built      exit status: are both binaries there?
#   deploy/k8s-tools.sh helm       print the helm binary's path
#   deploy/k8s-tools.sh promtool   print the promtool binary's path
#
# Settings: PICOMQ_TOOLS (tool cache, default ~/.cache/picomq-tools),
# PICOMQ_HELM_BIN / PICOMQ_PROMTOOL_BIN (use these binaries instead).
#
# The image itself needs no tool here: `make image` runs deploy/tools/image,
# a Go program built from go-containerregistry (module deploy/tools).
set -euo pipefail

HELM_VERSION=v4.3.2
PROMTOOL_VERSION=v0.316.0
TOOLS="${PICOMQ_TOOLS:-$HOME/.cache/picomq-tools}"
HELM_BIN="${PICOMQ_HELM_BIN:-$TOOLS/helm-$HELM_VERSION/helm}"
PROMTOOL_BIN="${PICOMQ_PROMTOOL_BIN:-$TOOLS/promtool-$PROMTOOL_VERSION/promtool}"

log() { echo "k8s-tools: $*" >&2; }

build_helm() {
  [ -x "$HELM_BIN" ] && return 0
  log "building helm $HELM_VERSION into $(dirname "$HELM_BIN") (about 4 minutes cold)"
  mkdir -p "$(dirname "$HELM_BIN")"
  GOFLAGS= GOBIN="$(dirname "$HELM_BIN")" go install -trimpath -ldflags=-s "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
}

build_promtool() {
  [ -x "$PROMTOOL_BIN" ] && return 0
  log "building promtool $PROMTOOL_VERSION into $(dirname "$PROMTOOL_BIN") (about 5 minutes cold)"
  mkdir -p "$(dirname "$PROMTOOL_BIN")"
  GOFLAGS= GOBIN="$(dirname "$PROMTOOL_BIN")" go install -trimpath -ldflags=-s "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
}

case "${1:-}" in
  build) build_helm; build_promtool ;;
  built) [ -x "$HELM_BIN" ] && [ -x "$PROMTOOL_BIN" ] ;;
  helm) echo "$HELM_BIN" ;;
  promtool) echo "$PROMTOOL_BIN" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
