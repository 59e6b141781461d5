#!/usr/bin/env bash
# Build the molecule base image (Debian bookworm, systemd as PID 1) from Debian
# packages with debootstrap + `docker import`: no container registry needed.
# Idempotent: skips the build when the image already exists.
set -euo pipefail
# shellcheck source=scripts/testbed/debootstrap.sh
. "$(dirname "$0")/debootstrap.sh"
image=${LLMOPS_BASE_IMAGE:-llmops/debian-systemd:bookworm}
image_present "$image" base && exit 0
debootstrap_rootfs bookworm systemd,systemd-sysv,dbus,python3,python3-venv,python3-apt,libnuma1,curl,ca-certificates,iproute2,procps,sudo
# Container hygiene: no getty, no units that need hardware; apt lists kept small.
rm -f "$root"/etc/systemd/system/getty.target.wants/* \
      "$root"/lib/systemd/system/multi-user.target.wants/getty.target || true
chroot "$root" systemctl mask systemd-firstboot.service systemd-udevd.service \
  systemd-modules-load.service sys-kernel-config.mount sys-kernel-debug.mount \
  systemd-remount-fs.service >/dev/null 2>&1 || true
echo 'deb '"$mirror"' bookworm main' > "$root"/etc/apt/sources.list
: > "$root"/etc/machine-id
rm -rf "$root"/var/cache/apt/archives/*.deb  # keep apt lists: the apt module trusts their mtime
tar -C "$root" -c . | docker import \
  --change 'CMD ["/lib/systemd/system/systemd"]' \
  --change 'ENV container=docker' - "$image"
echo "base image $image: built"
