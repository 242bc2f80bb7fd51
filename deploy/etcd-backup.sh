#!/bin/bash
# Saves a snapshot of this etcd member to S3 (etcd-backup.service, started
# by etcd-backup.timer every etcd_backup_interval on each member; the
# bucket's lifecycle rule expires snapshots after etcd_backup_retention_days).
#   etcd-backup.sh S3_URI [ENDPOINT]
# writes S3_URI/<UTC time>.db. Each member saves its own, so a backup exists
# while any member is up; any one snapshot restores the whole cluster
# (docs/operations.md, "Restore etcd").
# The snapshot goes through the member's own client port with its member
# certificate, is checked with `etcdutl snapshot status` (hash) before the
# upload, and is written on the data volume, not in memory.
set -euo pipefail
URI="${1:?usage: etcd-backup.sh s3://bucket/prefix [https://127.0.0.1:2379]}"
ENDPOINT="${2:-https://127.0.0.1:2379}"
TLS="${ETCD_BACKUP_TLS_DIR:-/etc/etcd/tls}"
WORK="${ETCD_BACKUP_WORK_DIR:-/var/lib/etcd}"
AWS="${AWS_CLI:-aws}"

tmp=$(mktemp -d "$WORK/backup.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# etcdctl logs every step; only a failure's log reaches the journal.
if ! etcdctl --endpoints "$ENDPOINT" --cacert "$TLS/ca.crt" --cert "$TLS/member.crt" --key "$TLS/member.key" \
  --command-timeout 5m snapshot save "$tmp/snapshot.db" >"$tmp/etcdctl.log" 2>&1; then
  cat "$tmp/etcdctl.log" >&2
  exit 1
fi
etcdutl snapshot status "$tmp/snapshot.db" >/dev/null
name="$(date -u +%Y%m%dT%H%M%SZ).db"
"$AWS" s3 cp --only-show-errors "$tmp/snapshot.db" "$URI/$name"
echo "etcd-backup: $URI/$name ($(stat -c %s "$tmp/snapshot.db") bytes)"
