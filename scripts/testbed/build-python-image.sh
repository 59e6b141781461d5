#!/usr/bin/env bash
# Build llmops/debian-python:<suite> (Debian's own python3 and venv, make) from
# Debian packages with debootstrap + `docker import`, like build-base-image.sh:
# the controller-side tests run on a second Python (trixie: 3.13) in it.
# Idempotent: skips the build when the image already exists.
# usage: build-python-image.sh [SUITE]   (default trixie)
set -euo pipefail
# shellcheck source=scripts/testbed/debootstrap.sh
. "$(dirname "$0")/debootstrap.sh"
suite=${1:-trixie}
image=${LLMOPS_PYTHON_IMAGE:-llmops/debian-python:$suite}
image_present "$image" python && exit 0
debootstrap_rootfs "$suite" python3,python3-venv,make,ca-certificates
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "python image $image: built ($(docker run --rm "$image" python3 --version))"
