#!/bin/bash
# Switches on etcd authentication with one role per PicoMQ node, so that
# each node's etcd client certificate (common name = node name, the etcd
# user) may write only what a node needs (run by the first etcd member's
# cloud-init once the cluster is healthy; run it again after adding nodes;
# every step is idempotent):
#   - every key of the registry prefix except other nodes' membership keys
#     (streams, manifests, counters, topics, groups, …: any node may own or
#     take over any stream, so these are shared);
#   - its own membership key, members/<node>, which holds its lease;
#   - read access to all membership keys (takeover compares them).
# The etcd members' own certificates (common names = member names) and
# root get the root role: snapshots (etcd-backup) and membership changes
# need it. A certificate from the CA whose common name is no user (a
# node's listener certificate, say) is refused.
#
#   etcd-auth.sh ENDPOINT
# Environment: PICOMQ_NODES (node names, space-separated), ETCD_MEMBERS
# (member names), PICOMQ_ETCD_PREFIX (default /picomq/), ETCD_AUTH_TLS_DIR
# (default /etc/etcd/tls: ca.crt, member.crt, member.key).
set -euo pipefail
ENDPOINT="${1:?usage: etcd-auth.sh https://127.0.0.1:2379}"
P="${PICOMQ_ETCD_PREFIX:-/picomq/}"
TLS="${ETCD_AUTH_TLS_DIR:-/etc/etcd/tls}"
E=(etcdctl --endpoints "$ENDPOINT" --cacert "$TLS/ca.crt" --cert "$TLS/member.crt" --key "$TLS/member.key")
log() { echo "etcd-auth: $*" >&2; }
q() { "${E[@]}" "$@" >/dev/null; }

user() { # USER ROLE: the user (no password: it authenticates by certificate) with ROLE
  "${E[@]}" user get "$1" >/dev/null 2>&1 || q user add "$1" --no-password
  q user grant-role "$1" "$2"
}

"${E[@]}" role get root >/dev/null 2>&1 || q role add root
user root root
for m in ${ETCD_MEMBERS:-}; do user "$m" root; done
for n in ${PICOMQ_NODES:-}; do
  r="picomq-node-$n"
  "${E[@]}" role get "$r" >/dev/null 2>&1 || q role add "$r"
  q role grant-permission "$r" readwrite "$P" "${P}members/"    # [P, P+members/)
  q role grant-permission "$r" readwrite "${P}members0" "${P%/}0" # after members/ to the end of P
  q role grant-permission --prefix "$r" read "${P}members/"
  q role grant-permission "$r" readwrite "${P}members/$n"
  user "$n" "$r"
done
if "${E[@]}" auth status 2>/dev/null | grep -q "Authentication Status: true"; then
  log "authentication already on; roles updated for: ${PICOMQ_NODES:-no nodes}"
else
  q auth enable
  log "authentication switched on; node roles: ${PICOMQ_NODES:-none}"
fi
