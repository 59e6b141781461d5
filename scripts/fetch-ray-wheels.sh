#!/usr/bin/env bash
# Download the pinned Ray and its dependencies as wheels (Python 3.11,
# manylinux x86_64) into one host directory, once; the ray molecule scenario
# mounts it into its nodes (they install with pip --no-index --find-links).
# usage: fetch-ray-wheels.sh [DIR]   (default $LLMOPS_RAY_WHEELS_DIR or /var/cache/llmops/ray-wheels)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk -F'"' '/^ray_version:/{print $2}' "$here/../roles/ray_cluster/defaults/main.yml")
dir=${1:-${LLMOPS_RAY_WHEELS_DIR:-/var/cache/llmops/ray-wheels}}
mkdir -p "$dir"
if ls "$dir"/ray-"$version"-cp311-*.whl >/dev/null 2>&1; then
  echo "ray wheels $version: present in $dir"
  exit 0
fi
pip=${PIP:-pip}
[ -x "$here/../.venv/bin/pip" ] && pip="$here/../.venv/bin/pip"
"$pip" download -q --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux2014_x86_64 -d "$dir" "ray==$version"
echo "ray wheels $version: downloaded into $dir"
