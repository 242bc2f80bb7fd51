#!/bin/bash
# Prepares the WAL disk on EVERY boot (picomq-disks.service runs it before
# picomq.service): an EC2 instance store keeps its data across a reboot but
# comes back blank after a stop/start, a host retirement or an instance
# replacement, so a once-per-instance format (cloud-init) leaves the node
# down with nothing to mount. This script makes the disk usable whatever
# state it is in:
#   - the instance-store disks (every NVMe "Instance Storage" device, or the
#     devices given in PICOMQ_DISKS) are found;
#   - several disks: an existing picomq RAID 0 is assembled (reboot); if any
#     disk is blank, the array is created afresh (its data went with the
#     stop: a RAID 0 missing one member holds nothing usable anyway);
#   - the device is formatted (XFS, label picomq-wal) only when it carries
#     no filesystem signature at all; a foreign filesystem stops the script
#     (exit 1) rather than being overwritten;
#   - it is mounted on the WAL directory (noatime), owned by picomq.
# Running it again on a prepared, mounted disk changes nothing.
#
# Environment (tests and other machines): PICOMQ_DISKS (space-separated
# devices instead of the NVMe discovery), PICOMQ_WAL_MOUNT (default
# /var/lib/picomq), PICOMQ_MD (default /dev/md/picomq-wal), PICOMQ_USER
# (default picomq; ownership is skipped when the user does not exist).
set -euo pipefail

MNT="${PICOMQ_WAL_MOUNT:-/var/lib/picomq}"
MD="${PICOMQ_MD:-/dev/md/picomq-wal}"
OWNER="${PICOMQ_USER:-picomq}"
LABEL=picomq-wal
log() { echo "picomq-disks: $*" >&2; }

disks=()
if [ -n "${PICOMQ_DISKS:-}" ]; then
  read -r -a disks <<<"$PICOMQ_DISKS"
else
  for d in /dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_*; do
    [ -e "$d" ] || continue
    case "$d" in *-part*) continue ;; esac
    disks+=("$(readlink -f "$d")")
  done
  if [ "${#disks[@]}" -gt 0 ]; then
    mapfile -t disks < <(printf '%s\n' "${disks[@]}" | sort -u)
  fi
fi
if [ "${#disks[@]}" -eq 0 ]; then
  log "no NVMe instance store found: the instance type must have one (e.g. i4i, i7ie, m6id, c6gd, r7gd)"
  exit 1
fi

if mountpoint -q "$MNT"; then
  log "$MNT already mounted; nothing to do"
  exit 0
fi

# blank DEV: true when DEV carries no signature (filesystem, RAID, table).
blank() { [ -z "$(wipefs --noheadings --output TYPE "$1" 2>/dev/null)" ]; }

dev="${disks[0]}"
if [ "${#disks[@]}" -gt 1 ]; then
  dev="$MD"
  # udev may have assembled the array at boot already, under any name.
  holder=$(ls "/sys/class/block/$(basename "${disks[0]}")/holders" 2>/dev/null | grep '^md' | head -n1 || true)
  if [ -n "$holder" ]; then
    dev="/dev/$holder"
    log "RAID 0 already assembled as $dev"
  elif [ ! -e "$MD" ]; then
    all_members=1
    for d in "${disks[@]}"; do
      mdadm --examine "$d" >/dev/null 2>&1 || all_members=0
    done
    if [ "$all_members" = 1 ] && mdadm --assemble "$MD" "${disks[@]}"; then
      log "assembled the RAID 0 of ${#disks[@]} disks (reboot: data kept)"
    else
      log "creating a RAID 0 over ${#disks[@]} blank or partial disks (new instance, or stop/start)"
      for d in "${disks[@]}"; do mdadm --zero-superblock --force "$d" 2>/dev/null || true; done
      mdadm --create "$MD" --run --level=0 --raid-devices="${#disks[@]}" --name="$LABEL" "${disks[@]}"
    fi
  fi
fi

if blank "$dev"; then
  log "formatting $dev (XFS, label $LABEL)"
  mkfs.xfs -q -f -L "$LABEL" "$dev"
elif [ "$(blkid -o value -s LABEL "$dev" 2>/dev/null)" != "$LABEL" ]; then
  log "$dev holds $(wipefs --noheadings --output TYPE "$dev" | tr '\n' ' ')but not the $LABEL filesystem; refusing to format it"
  exit 1
fi

install -d -m 0750 "$MNT"
mount -o noatime "$dev" "$MNT"
chmod 0750 "$MNT"
if id "$OWNER" >/dev/null 2>&1; then chown "$OWNER:$OWNER" "$MNT"; fi
log "mounted $dev on $MNT"
