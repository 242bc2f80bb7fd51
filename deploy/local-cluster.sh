#!/usr/bin/env bash
# A three-node PicoMQ cluster on loopback for development and demos:
# one etcd, one MinIO (via deploy/local-minio.sh) and three `picomq serve`
# processes sharing them. See docs/operations.md.
#
#   deploy/local-cluster.sh up [BIN]  build, start everything, print the URLs
#                                     (nodes run BIN instead of this tree's build if given)
#   deploy/local-cluster.sh status   what runs (from the pid file)
#   deploy/local-cluster.sh down     stop exactly the processes `up` started
#   deploy/local-cluster.sh upgrade BIN   rolling upgrade: drain, stop, start from BIN, ready; node by node
#   deploy/local-cluster.sh build-ref [REF]  build the picomq of git REF once (default: the
#                                     last tag before HEAD, else HEAD's first parent), print its path
#
# Everything lives under $PICOMQ_CLUSTER_DIR (default ./cluster-data):
# node data dirs, etcd data, MinIO state, logs/, cluster.pids, cluster.env.
# Ports (loopback only): nodes $PICOMQ_CLUSTER_PORT+1..+3 (default 4441-4443),
# their Kafka listeners 19093-19095, etcd 12379 (peer 12380), MinIO from 19100.
# MinIO binary: $PICOMQ_MINIO_BIN, else the tool cache local-minio.sh builds.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${PICOMQ_CLUSTER_DIR:-$PWD/cluster-data}"
BASE="${PICOMQ_CLUSTER_PORT:-4440}"
KAFKA_BASE="${PICOMQ_CLUSTER_KAFKA_PORT:-19092}"
ETCD_PORT="${PICOMQ_CLUSTER_ETCD_PORT:-12379}"
LEASE_TTL="${PICOMQ_CLUSTER_LEASE_TTL:-5s}"
SEAL_MAX_AGE="${PICOMQ_CLUSTER_SEAL_MAX_AGE:-1s}"
# Seconds between one node's ready and the next node's drain in `upgrade`:
# Kafka clients refresh metadata at most so often (franz-go: every 5 s), and
# each restart costs a client one refresh (docs/operations.md).
UPGRADE_SETTLE="${PICOMQ_CLUSTER_UPGRADE_SETTLE:-6}"
NODES=(node-a node-b node-c)
PIDS="$DIR/cluster.pids"
BIN="$PWD/bin"

log() { echo "local-cluster: $*" >&2; }
die() { log "$*"; exit 1; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# alive PID EXE: PID runs and is the executable we started (guards against
# a PID reused after a reboot or a crash).
alive() {
  [ -r "/proc/$1/cmdline" ] || return 1
  tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -1 | grep -qxF "$2"
}

wait_http() { # URL SECONDS PID EXE LOGFILE
  local i
  for i in $(seq 1 $(($2 * 10))); do
    if curl -sf -m 2 "$1" >/dev/null 2>&1; then return 0; fi
    if ! alive "$3" "$4"; then
      log "$4 (pid $3) exited during start; last log lines:"; tail -20 "$5" >&2; return 1
    fi
    sleep 0.1
  done
  log "$1 not ready after $2 s; log: $5"; return 1
}

# start_node INDEX BINARY: runs node INDEX from BINARY (appended to the pid
# file with that executable), against the cluster's etcd and MinIO.
start_node() {
  local i=$1 exe=$2 id=${NODES[$1]} addr="127.0.0.1:$((BASE + 1 + $1))"
  # shellcheck disable=SC1091
  . "$DIR/minio/env"
  local store="s3://$PICOMQ_S3_BUCKET?endpoint=$PICOMQ_S3_ENDPOINT&region=us-east-1"
  AWS_ACCESS_KEY_ID="$PICOMQ_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$PICOMQ_S3_SECRET_KEY" AWS_REGION=us-east-1 \
    nohup "$exe" serve --node-id "$id" --data-dir "$DIR/$id" \
    --http-addr "$addr" --advertise-url "http://$addr" --kafka-addr "127.0.0.1:$((KAFKA_BASE + 1 + i))" \
    --etcd-endpoints "127.0.0.1:$ETCD_PORT" --object-store "$store" \
    --lease-ttl "$LEASE_TTL" --seal-max-age "$SEAL_MAX_AGE" \
    >>"$DIR/logs/$id.log" 2>&1 </dev/null &
  echo "$! $exe $id" >>"$PIDS"
}

# upgrade BINARY: the rolling upgrade of docs/operations.md, node by node:
# drain it (POST /_sys/drain: its streams move to the other nodes), stop it
# (SIGTERM), start it again from BINARY, wait for /readyz, next node. The
# cluster keeps serving throughout: clients see 307s to the new owners and
# retryable 503s while a stream moves, never a lost acknowledgement.
upgrade() {
  local new=${1:-}
  [ -n "$new" ] && [ -x "$new" ] || die "usage: $0 upgrade /path/to/new/picomq"
  [ -s "$PIDS" ] || die "not running (no $PIDS)"
  new=$(readlink -f "$new")
  "$new" version >&2
  local i id url pid exe moved
  for i in "${!NODES[@]}"; do
    id=${NODES[$i]}
    url="http://127.0.0.1:$((BASE + 1 + i))"
    read -r pid exe _ <<<"$(grep " $id\$" "$PIDS" || true)"
    if [ -n "${pid:-}" ] && alive "$pid" "$exe"; then
      moved=$(curl -sf -m 60 -X POST "$url/_sys/drain" || echo "drain failed")
      log "$id: drained ($moved); stopping"
      stop_pids TERM "$id"
    fi
    grep -v " $id\$" "$PIDS" >"$PIDS.tmp" || true
    mv "$PIDS.tmp" "$PIDS"
    start_node "$i" "$new"
    read -r pid _ <<<"$(grep " $id\$" "$PIDS")"
    wait_http "$url/readyz" 60 "$pid" "$new" "$DIR/logs/$id.log" || die "$id did not become ready on $new; the other nodes still serve"
    log "$id: ready on $new"
    if [ "$i" -lt $((${#NODES[@]} - 1)) ] && [ "$UPGRADE_SETTLE" != 0 ]; then
      log "waiting ${UPGRADE_SETTLE}s before the next node (clients' metadata refresh interval)"
      sleep "$UPGRADE_SETTLE"
    fi
  done
  log "upgrade done"
}

# build_ref [REF]: the picomq binary of commit REF, built once from `git
# archive` (the repository and its worktrees are left alone) and cached by
# commit under $PICOMQ_BUILD_CACHE (default ${TMPDIR:-/tmp}/picomq-builds).
# REF defaults to the previous release: the last tag reachable from HEAD's
# parent, else the parent itself (on main: the previous merge). Prints the
# binary's path; the build's output goes to stderr.
build_ref() {
  local ref=${1:-} commit cache out src
  command -v git >/dev/null || die "git is required"
  if [ -z "$ref" ]; then
    ref=$(git describe --tags --abbrev=0 'HEAD^' 2>/dev/null || echo 'HEAD^')
  fi
  commit=$(git rev-parse --verify --quiet "$ref^{commit}") || die "no commit $ref (a shallow clone? fetch its history)"
  cache="${PICOMQ_BUILD_CACHE:-${TMPDIR:-/tmp}/picomq-builds}"
  out="$cache/$commit/picomq"
  if [ -x "$out" ]; then
    log "$ref = $commit: cached $out"
    echo "$out"
    return 0
  fi
  mkdir -p "$cache"
  src=$(mktemp -d "$cache/src.XXXXXX")
  log "$ref = $commit: building picomq (git archive into $src)"
  git archive --format=tar "$commit" | tar -x -C "$src"
  if ! (cd "$src" && go build -ldflags "-X main.commit=$commit" -o "$src/picomq.bin" ./cmd/picomq) >&2; then
    rm -rf "$src"
    die "building $ref ($commit) failed"
  fi
  mkdir -p "$cache/$commit"
  mv "$src/picomq.bin" "$out.tmp" && mv "$out.tmp" "$out" # atomic: concurrent builds of one commit are fine
  rm -rf "$src"
  echo "$out"
}

up() {
  local nodebin=${1:-}
  if [ -n "$nodebin" ]; then
    [ -x "$nodebin" ] || die "up: $nodebin is not an executable"
    nodebin=$(readlink -f "$nodebin")
  fi
  if [ -s "$PIDS" ]; then
    while read -r pid exe _; do
      alive "$pid" "$exe" && die "already running (pid $pid, $exe); run '$0 down' first, or '$0 status'"
    done <"$PIDS"
    rm -f "$PIDS"
  fi
  command -v curl >/dev/null || die "curl is required"
  local p
  for p in "$ETCD_PORT" "$((ETCD_PORT + 1))" $(seq $((BASE + 1)) $((BASE + ${#NODES[@]}))) \
    $(seq $((KAFKA_BASE + 1)) $((KAFKA_BASE + ${#NODES[@]}))); do
    port_busy "$p" && die "port 127.0.0.1:$p is in use; set PICOMQ_CLUSTER_PORT / _KAFKA_PORT / _ETCD_PORT"
  done
  mkdir -p "$DIR/logs" "$BIN"
  : >"$PIDS"

  if [ -z "$nodebin" ]; then
    log "building bin/picomq"
    go build -o "$BIN/picomq" ./cmd/picomq
    nodebin="$BIN/picomq"
  fi
  log "building bin/etcd"
  go build -o "$BIN/etcd" ./e2e/cmd/etcd

  # etcd: one member, data under $DIR/etcd (etcd creates it mode 0700).
  local etcd_url="http://127.0.0.1:$ETCD_PORT" peer="http://127.0.0.1:$((ETCD_PORT + 1))"
  nohup "$BIN/etcd" --name local-cluster --data-dir "$DIR/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "local-cluster=$peer" --log-level warn \
    >"$DIR/logs/etcd.log" 2>&1 </dev/null &
  local etcd_pid=$!
  echo "$etcd_pid $BIN/etcd etcd" >>"$PIDS"
  wait_http "$etcd_url/health" 30 "$etcd_pid" "$BIN/etcd" "$DIR/logs/etcd.log" || { down; exit 1; }

  # MinIO through local-minio.sh, with its own state dir and bucket so it
  # never touches the developer's default MinIO.
  local mbin state="$DIR/minio"
  mbin=$(deploy/local-minio.sh bin) # $PICOMQ_MINIO_BIN, else the pinned build in the tool cache
  [ -x "$mbin" ] || log "no MinIO at $mbin: local-minio.sh builds it (about 10 minutes on a cold cache)"
  PICOMQ_MINIO_STATE="$state" PICOMQ_MINIO_PORT="${PICOMQ_CLUSTER_MINIO_PORT:-19100}" \
    PICOMQ_MINIO_BUCKET=picomq-cluster deploy/local-minio.sh start >/dev/null || { down; exit 1; }
  echo "$(cat "$state/minio.pid") $mbin minio" >>"$PIDS"

  local i urls=()
  for i in "${!NODES[@]}"; do
    start_node "$i" "$nodebin"
    urls+=("${NODES[$i]} http://127.0.0.1:$((BASE + 1 + i))")
  done
  for i in "${!NODES[@]}"; do
    read -r pid _ <<<"$(grep " ${NODES[$i]}\$" "$PIDS")"
    wait_http "http://127.0.0.1:$((BASE + 1 + i))/readyz" 60 "$pid" "$nodebin" "$DIR/logs/${NODES[$i]}.log" || { down; exit 1; }
  done

  {
    echo "PICOMQ_ETCD_ENDPOINTS=127.0.0.1:$ETCD_PORT"
    echo "PICOMQ_S3_ENDPOINT=$PICOMQ_S3_ENDPOINT"
    echo "PICOMQ_S3_BUCKET=$PICOMQ_S3_BUCKET"
    for i in "${!NODES[@]}"; do echo "PICOMQ_NODE_$i=http://127.0.0.1:$((BASE + 1 + i))"; done
  } >"$DIR/cluster.env"

  echo "PicoMQ local cluster is up (data and logs in $DIR):"
  for u in "${urls[@]}"; do echo "  ${u% *}  ${u#* }"; done
  echo "  etcd    http://127.0.0.1:$ETCD_PORT"
  echo "  minio   $PICOMQ_S3_ENDPOINT  bucket $PICOMQ_S3_BUCKET (user $PICOMQ_S3_ACCESS_KEY)"
  echo "Try: curl -X PUT ${urls[0]#* }/demo -H 'Content-Type: text/plain'"
  echo "     curl -L ${urls[1]#* }/demo -d hello -H 'Content-Type: text/plain'   # 307 to the owner"
  echo "     curl ${urls[2]#* }/_sys/cluster"
  echo "Stop with: $0 down"
}

status() {
  [ -s "$PIDS" ] || { echo "not running (no $PIDS)"; return 0; }
  local pid exe name
  while read -r pid exe name; do
    if alive "$pid" "$exe"; then echo "$name: running (pid $pid)"; else echo "$name: not running (was pid $pid)"; fi
  done <"$PIDS"
  [ -f "$DIR/cluster.env" ] && cat "$DIR/cluster.env"
  return 0
}

# stop_pids SIGNAL NAME...: signal the listed components, wait up to 40 s
# for them to exit, SIGKILL what is left. Only PIDs from the pid file whose
# executable still matches are touched.
stop_pids() {
  local sig=$1 pid exe name want i left
  shift
  local targets=()
  while read -r pid exe name; do
    for want in "$@"; do
      if [ "$name" = "$want" ] && alive "$pid" "$exe"; then
        kill "-$sig" "$pid" 2>/dev/null || true
        targets+=("$pid:$exe:$name")
      fi
    done
  done <"$PIDS"
  for i in $(seq 1 400); do
    left=0
    for t in "${targets[@]}"; do
      IFS=: read -r pid exe name <<<"$t"
      alive "$pid" "$exe" && left=1
    done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  for t in "${targets[@]}"; do
    IFS=: read -r pid exe name <<<"$t"
    if alive "$pid" "$exe"; then log "$name (pid $pid) still running after 40 s; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
}

down() {
  [ -s "$PIDS" ] || { log "nothing to stop (no $PIDS)"; return 0; }
  # Nodes first (SIGTERM drains them while etcd and MinIO are still up),
  # then MinIO, then etcd.
  stop_pids TERM "${NODES[@]}"
  stop_pids TERM minio
  stop_pids TERM etcd
  # local-minio.sh's own pid/env files (its process is gone; not calling
  # its `stop`, which would signal the recorded PID unverified).
  rm -f "$DIR/minio/minio.pid" "$DIR/minio/env"
  rm -f "$PIDS" "$DIR/cluster.env"
  log "stopped; data kept in $DIR (rm -rf it for a fresh cluster)"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  build-ref) build_ref "${2:-}" ;;
  upgrade) upgrade "${2:-}" ;;
  down) down ;;
  status) status ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
