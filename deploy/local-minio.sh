#!/usr/bin/env bash
# A loopback MinIO for PicoMQ's tests, benchmarks and local development —
# the same one CI starts (.ci/run uses this script).
#
#   deploy/local-minio.sh build            build the pinned MinIO into the tool cache (~10 min cold)
#   deploy/local-minio.sh built            exit status: is the binary there already?
#   deploy/local-minio.sh bin              print the binary's path
#   deploy/local-minio.sh start [--export] build if needed, start, create the bucket; prints the
#                                          PICOMQ_S3_* settings (as `export` lines with --export)
#   deploy/local-minio.sh env [--export]   the settings, only if this state dir's MinIO answers
#   deploy/local-minio.sh stop             stop exactly the MinIO this state dir started
#   deploy/local-minio.sh clean            stop, then delete its data
#
# Settings (environment): PICOMQ_MINIO_BIN (the MinIO binary; default: the pinned build in
# the tool cache), PICOMQ_MINIO_STATE (state dir: data, pid, log, env;
# default ~/.local/state/picomq-minio), PICOMQ_MINIO_PORT (first port tried,
# default 19000; the console takes port+1), PICOMQ_MINIO_BUCKET (picomq-test).
#
# MinIO (AGPLv3) runs as a separate process only; PicoMQ never links it.
set -euo pipefail

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
TOOLS="${PICOMQ_TOOLS:-$HOME/.cache/picomq-tools}"
MINIO_BIN="${PICOMQ_MINIO_BIN:-$TOOLS/minio-$MINIO_VERSION/minio}" # the e2e tests read the same variable
STATE="${PICOMQ_MINIO_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/picomq-minio}"
FIRST_PORT="${PICOMQ_MINIO_PORT:-19000}"
BUCKET="${PICOMQ_MINIO_BUCKET:-picomq-test}"
ACCESS_KEY=picomq
SECRET_KEY=picomq-secret # >= 8 characters, as MinIO requires; loopback only

log() { echo "local-minio: $*" >&2; }

build() {
  if [ -x "$MINIO_BIN" ]; then return 0; fi
  log "building MinIO $MINIO_VERSION into $(dirname "$MINIO_BIN") (about 10 minutes on a cold cache)"
  mkdir -p "$(dirname "$MINIO_BIN")"
  # GOFLAGS of the caller (e.g. -mod=vendor) must not leak into an
  # install outside this module.
  GOFLAGS= GOBIN="$(dirname "$MINIO_BIN")" go install "github.com/minio/minio@$MINIO_VERSION"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# running: the pid file names a live process and its endpoint is healthy.
running() {
  [ -f "$STATE/minio.pid" ] && [ -f "$STATE/env" ] || return 1
  kill -0 "$(cat "$STATE/minio.pid")" 2>/dev/null || return 1
  # shellcheck disable=SC1091
  (. "$STATE/env" && curl -sf -m 2 "$PICOMQ_S3_ENDPOINT/minio/health/live" >/dev/null)
}

print_env() {
  if [ "${1:-}" = "--export" ]; then
    sed 's/^/export /' "$STATE/env"
  else
    tr '\n' ' ' <"$STATE/env"; echo
  fi
}

start() {
  if running; then print_env "${1:-}"; return 0; fi
  build
  mkdir -p "$STATE/data"
  local port="$FIRST_PORT" tries=0
  while port_busy "$port" || port_busy "$((port + 1))"; do
    port=$((port + 2)); tries=$((tries + 1))
    if [ "$tries" -ge 50 ]; then log "no free port pair from $FIRST_PORT"; exit 1; fi
  done
  # Started directly in the background (not through a subshell) so that
  # $! is MinIO's own PID: that exact process is what `stop` kills.
  MINIO_ROOT_USER="$ACCESS_KEY" MINIO_ROOT_PASSWORD="$SECRET_KEY" MINIO_BROWSER=off \
    nohup "$MINIO_BIN" server --quiet --address "127.0.0.1:$port" \
    --console-address "127.0.0.1:$((port + 1))" "$STATE/data" >"$STATE/minio.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$STATE/minio.pid"
  local endpoint="http://127.0.0.1:$port" i
  for i in $(seq 1 300); do
    if curl -sf -m 2 "$endpoint/minio/health/live" >/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "MinIO exited during start; last log lines:"; tail -20 "$STATE/minio.log" >&2; exit 1
    fi
    sleep 0.1
  done
  if ! curl -sf -m 2 "$endpoint/minio/health/live" >/dev/null; then
    log "MinIO not healthy after 30 s"; kill "$pid"; exit 1
  fi
  # Create the bucket (200 new, 409 already ours). Signed with curl's
  # SigV4 so no extra client is needed. "Live" is not "ready": a MinIO
  # still initialising answers 503, so retry for up to 30 s.
  local code
  for i in $(seq 1 300); do
    code=$(curl -s -o "$STATE/mkbucket.out" -w '%{http_code}' -X PUT \
      --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$endpoint/$BUCKET")
    if [ "$code" = 200 ] || [ "$code" = 409 ]; then break; fi
    sleep 0.1
  done
  if [ "$code" != 200 ] && [ "$code" != 409 ]; then
    log "creating bucket $BUCKET failed: HTTP $code"; cat "$STATE/mkbucket.out" >&2; kill "$pid"; exit 1
  fi
  cat >"$STATE/env" <<ENV
PICOMQ_S3_ENDPOINT=$endpoint
PICOMQ_S3_ACCESS_KEY=$ACCESS_KEY
PICOMQ_S3_SECRET_KEY=$SECRET_KEY
PICOMQ_S3_BUCKET=$BUCKET
ENV
  log "MinIO pid $pid on $endpoint, bucket $BUCKET, data $STATE/data"
  print_env "${1:-}"
}

stop() {
  [ -f "$STATE/minio.pid" ] || return 0
  local pid i
  pid=$(cat "$STATE/minio.pid")
  if kill "$pid" 2>/dev/null; then
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "MinIO $pid ignored SIGTERM; SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$STATE/minio.pid" "$STATE/env"
}

case "${1:-}" in
  build) build ;;
  built) [ -x "$MINIO_BIN" ] ;;
  bin) echo "$MINIO_BIN" ;;
  start) start "${2:-}" ;;
  env) if running; then print_env "${2:-}"; fi ;;
  stop) stop ;;
  clean) stop; rm -rf "$STATE" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
