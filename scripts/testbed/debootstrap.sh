#!/usr/bin/env bash
# Shared by the image builders (sourced, not run): a minimal Debian root file
# system from Debian packages, for `docker import` (no container registry).
#   image_present IMAGE LABEL      -> exit 0 from the caller when IMAGE exists
#   debootstrap_rootfs SUITE PKGS  -> sets $root (removed on EXIT) and $mirror

debian_mirror() {
  local m
  m=${DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
  echo "${m:-http://deb.debian.org/debian}"
}

image_present() {
  docker image inspect "$1" >/dev/null 2>&1 && echo "$2 image $1: present"
}

debootstrap_rootfs() {
  local suite=$1 pkgs=$2 log="/tmp/llmops-debootstrap-$1.log"
  mirror=$(debian_mirror)
  root=$(mktemp -d "/tmp/llmops-rootfs-$suite.XXXXXX")
  # shellcheck disable=SC2064 # expand $root now: it is this build's directory
  trap "rm -rf '$root'" EXIT
  echo "debootstrap $suite from $mirror into $root"
  debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror" >"$log" 2>&1 || {
    tail -n 40 "$log" >&2; return 1; }
}
