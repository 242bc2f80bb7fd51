#!/usr/bin/env bash
# OpenTofu and TFLint for the offline Terraform checks (`make tf-check`,
# part of `make test`). Neither is packaged by Debian; both build from the
# Go module proxy into the tool cache, outside the repository:
#
#   deploy/tf-tools.sh build    build both if missing (tofu ~6-7 min, tflint ~4 min cold, 2 cores)
#   deploy/tf-tools.sh built    exit status: are both binaries there?
#   deploy/tf-tools.sh tofu     print the tofu binary's path
#   deploy/tf-tools.sh tflint   print the tflint binary's path
#
# Settings: PICOMQ_TOOLS (tool cache, default ~/.cache/picomq-tools),
# PICOMQ_TOFU_BIN / PICOMQ_TFLINT_BIN (use these binaries instead).
#
# OpenTofu's own go.mod has replace directives, so `go install tofu@v` is
# refused; a throwaway wrapper module that requires it (with the same hcl
# replacement OpenTofu uses) builds cmd/tofu instead.
set -euo pipefail

TOFU_VERSION=v1.12.6
TFLINT_VERSION=v0.64.0
# OpenTofu v1.12.6 replaces hashicorp/hcl/v2 with its fork; the wrapper must too.
TOFU_HCL_REPLACE='github.com/hashicorp/hcl/v2 v2.20.1 => github.com/opentofu/hcl/v2 v2.20.2-0.20251021132045-587d123c2828'
TOOLS="${PICOMQ_TOOLS:-$HOME/.cache/picomq-tools}"
TOFU_BIN="${PICOMQ_TOFU_BIN:-$TOOLS/tofu-$TOFU_VERSION/tofu}"
TFLINT_BIN="${PICOMQ_TFLINT_BIN:-$TOOLS/tflint-$TFLINT_VERSION/tflint}"

log() { echo "tf-tools: $*" >&2; }

build_tflint() {
  [ -x "$TFLINT_BIN" ] && return 0
  log "building tflint $TFLINT_VERSION into $(dirname "$TFLINT_BIN") (about 4 minutes cold)"
  mkdir -p "$(dirname "$TFLINT_BIN")"
  GOFLAGS= GOBIN="$(dirname "$TFLINT_BIN")" go install "github.com/terraform-linters/tflint@$TFLINT_VERSION"
}

build_tofu() {
  [ -x "$TOFU_BIN" ] && return 0
  log "building OpenTofu $TOFU_VERSION into $(dirname "$TOFU_BIN") (about 7 minutes cold)"
  local dir
  dir="$(dirname "$TOFU_BIN")/wrap"
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<MOD
module picomq.invalid/tofuwrap

go 1.26

require github.com/opentofu/opentofu $TOFU_VERSION

replace $TOFU_HCL_REPLACE
MOD
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"
GO
  (cd "$dir" && GOFLAGS= go mod tidy && GOFLAGS= go build -o "$TOFU_BIN.tmp" github.com/opentofu/opentofu/cmd/tofu)
  mv "$TOFU_BIN.tmp" "$TOFU_BIN"
}

case "${1:-}" in
  build) build_tflint; build_tofu ;;
  built) [ -x "$TOFU_BIN" ] && [ -x "$TFLINT_BIN" ] ;;
  tofu) echo "$TOFU_BIN" ;;
  tflint) echo "$TFLINT_BIN" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
