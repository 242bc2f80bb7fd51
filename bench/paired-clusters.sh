#!/bin/bash
# paired-clusters.sh: compare picomq builds' 1-client replicated append
# latency on a loaded machine (docs/benchmarks.md, "Replicated appends at
# 1 client: one append on both sides of the wire").
#
#   bench/paired-clusters.sh OUT ITERATIONS "NODE FLAGS" NAME=BINARY...
#
# Every build's cluster is up at once (3 nodes, an etcd and a file://
# object store each, on 127.0.0.1 from port $PAIRED_BASE_PORT, default
# 29421, ten ports per cluster). Each iteration runs, on each cluster in
# turn (the order reversed every iteration), 2 s of 1-client replicated
# appends then 2 s of local ones (picomq bench, 100 B records) and prints
# one line: iteration, load average, then NAME, replicated p50, local p50
# (ms) per cluster; OUT/points.txt collects the lines. The figure to
# compare is replicated p50 / local p50 of the same cluster and iteration:
# both sides of a ratio ran seconds apart, so the machine's load moves
# them together. Needs PICOMQ_ETCD_BIN (an etcd server binary).
#
# Example: bench/paired-clusters.sh /tmp/pc 16 "--replica-ack write --replica-sync-interval 10ms" \
#            main=/tmp/main/picomq branch=bin/picomq
set -u
out=$1; iters=$2; flags=$3; shift 3
etcd=${PICOMQ_ETCD_BIN:?set PICOMQ_ETCD_BIN to an etcd server binary}
base=${PAIRED_BASE_PORT:-29421}
mkdir -p "$out"; rm -rf "$out/work"; mkdir -p "$out/work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

start_cluster() { # name binary base-port
  local name=$1 bin=$2 bp=$3 w=$out/work/$1 i=0 t n id
  mkdir -p "$w"
  "$etcd" --data-dir "$w/etcd" --name e --listen-client-urls "http://127.0.0.1:$bp" --advertise-client-urls "http://127.0.0.1:$bp" \
    --listen-peer-urls "http://127.0.0.1:$((bp+1))" --initial-advertise-peer-urls "http://127.0.0.1:$((bp+1))" \
    --initial-cluster "e=http://127.0.0.1:$((bp+1))" --log-level error > "$w/etcd.log" 2>&1 &
  pids+=($!)
  for t in $(seq 1 60); do curl -sf "http://127.0.0.1:$bp/health" > /dev/null && break; sleep 0.5; done
  for id in a b c; do
    "$bin" serve --data-dir "$w/n$id" --http-addr "127.0.0.1:$((bp+2+i))" --node-id "repl-$id" --log-level warn --kafka-addr off \
      --etcd-endpoints "http://127.0.0.1:$bp" --object-store "file://$w/obj" --lease-ttl 5s $flags > "$w/n$id.log" 2>&1 &
    pids+=($!)
    i=$((i+1))
  done
  for t in $(seq 1 120); do
    n=$(curl -s "http://127.0.0.1:$((bp+2))/_sys/cluster" | grep -o '"nodeId"' | wc -l)
    [ "$n" = 3 ] && break
    sleep 0.5
  done
  [ "$n" = 3 ] || { echo "$name: the 3 nodes did not join (logs in $w)" >&2; exit 1; }
  for d in replicated local; do
    curl -sf -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' -H "Pico-Durability: $d" \
      "http://127.0.0.1:$((bp+2))/pc/$d/0" || { echo "$name: create the $d stream failed" >&2; exit 1; }
  done
}

point() { # binary port durability: the p50 in ms
  "$1" bench --json --server "http://127.0.0.1:$2" --protocol pico --producers 1 --streams 1 --record-size 100 \
    --duration 2s --warmup 500ms --prefix "/pc/$3" --keep 2>/dev/null |
    python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["ackLatencyMs"]["p50"])' 2>/dev/null || echo nan
}

names=(); bins=(); ports=(); k=0
for s in "$@"; do
  names+=("${s%%=*}"); bins+=("${s#*=}"); ports+=($((base+10*k+2)))
  start_cluster "${s%%=*}" "${s#*=}" $((base+10*k))
  k=$((k+1))
done
for it in $(seq 1 "$iters"); do
  order=$(seq 0 $((k-1)))
  [ $((it % 2)) -eq 0 ] && order=$(seq $((k-1)) -1 0)
  line="$it $(cut -d' ' -f1 /proc/loadavg)"
  for j in $order; do
    line="$line ${names[$j]} $(point "${bins[$j]}" "${ports[$j]}" replicated) $(point "${bins[$j]}" "${ports[$j]}" local)"
  done
  echo "$line" | tee -a "$out/points.txt"
done
