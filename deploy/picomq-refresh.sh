#!/bin/bash
# Re-reads the node's certificates and tokens from SSM Parameter Store and
# reloads picomq when one changed (picomq-refresh.timer, every 15 minutes,
# installed by cloud-init; cloud-init's own first fetch is this script
# with --no-reload). A certificate Terraform renewed (early_renewal_hours)
# or a token file changed in SSM thus reaches every node without a restart:
# `systemctl reload picomq` (SIGHUP) re-reads the token file, the listener
# certificate and the etcd client certificate; connections already open
# keep working, new handshakes get the new certificate.
#
#   picomq-refresh [--no-reload]
#
# PICOMQ_REFRESH_LIST (default /etc/picomq/refresh.list) has one
# "<parameter name> <file>" per line. A changed value is written beside
# the file and renamed over it (0640, root:picomq), so picomq never reads
# half a file; an empty or failed fetch changes nothing and exits 1.
# Settings: AWS_CLI (default aws), AWS_REGION, PICOMQ_RELOAD (default
# "systemctl reload picomq.service"), PICOMQ_GROUP (default picomq).
set -euo pipefail
LIST="${PICOMQ_REFRESH_LIST:-/etc/picomq/refresh.list}"
AWS="${AWS_CLI:-aws}"
RELOAD="${PICOMQ_RELOAD:-systemctl reload picomq.service}"
GROUP="${PICOMQ_GROUP:-picomq}"
reload=1
[ "${1:-}" = "--no-reload" ] && reload=0
log() { echo "picomq-refresh: $*" >&2; }

changed=()
while read -r name file; do
  case "$name" in "" | "#"*) continue ;; esac
  install -d -m 0750 "$(dirname "$file")"
  tmp="$file.refresh"
  region=()
  [ -n "${AWS_REGION:-}" ] && region=(--region "$AWS_REGION")
  if ! "$AWS" ssm get-parameter "${region[@]}" --with-decryption --name "$name" \
    --query Parameter.Value --output text >"$tmp" || [ ! -s "$tmp" ]; then
    rm -f "$tmp"
    log "cannot read $name; $file unchanged"
    exit 1
  fi
  if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
    rm -f "$tmp"
    continue
  fi
  chmod 0640 "$tmp"
  if getent group "$GROUP" >/dev/null 2>&1; then chown "root:$GROUP" "$(dirname "$file")" "$tmp"; fi
  mv "$tmp" "$file"
  changed+=("$file")
done <"$LIST"

if [ "${#changed[@]}" -eq 0 ]; then
  log "unchanged"
  exit 0
fi
log "updated ${changed[*]}"
if [ "$reload" = 1 ]; then
  log "reloading: $RELOAD"
  $RELOAD
fi
