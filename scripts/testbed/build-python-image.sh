#!/usr/bin/env bash
# Build llmops/debian-python:<suite> (Debian's own python3 and venv, make) from
# Debian packages with debootstrap + `docker import`, like build-base-image.sh:
# the controller-side tests run on a second Python (trixie: 3.13) in it.
# Idempotent: skips the build when the image already exists.
# usage: build-python-image.sh [SUITE]   (default trixie)
set -euo pipefail
suite=${1:-trixie}
image=${LLMOPS_PYTHON_IMAGE:-llmops/debian-python:$suite}
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "python image $image: present"
  exit 0
fi
root=$(mktemp -d /tmp/llmops-pyroot.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "debootstrap $suite from $mirror into $root"
debootstrap --variant=minbase --include=python3,python3-venv,make,ca-certificates \
  "$suite" "$root" "$mirror" >"/tmp/llmops-debootstrap-$suite.log" 2>&1 || {
  tail -n 40 "/tmp/llmops-debootstrap-$suite.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "python image $image: built ($(docker run --rm "$image" python3 --version))"
