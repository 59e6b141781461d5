#!/usr/bin/env bash
# `make demo`: deploy a real vLLM (CPU build) with site.yml and print the report.
#
# Always into a local Debian container with systemd as PID 1 (inventories/local).
# The container starts from the test bed's vLLM node image when it exists (the
# base image plus the vllm_service role's install phase, shared with the
# molecule scenarios: site.yml's install phase then finds the pin satisfied,
# the day-2 path); otherwise from the Debian base image, and site.yml installs
# vLLM into it once (no image of its own is built for the demo).
#
# `make demo-host` (DEMO_ON_HOST=1) deploys onto THIS machine instead
# (inventories/localhost: apt packages, a `vllm` user, vllm@default on :8000);
# it needs systemd as PID 1 and is never chosen implicitly.
#
# Environment: DEMO_IMAGE_PREFIX (default llmops: images PREFIX/debian-systemd:bookworm
# and PREFIX/vllm-node:<vllm_version>), DEMO_NODE (container name, default
# llmops-demo). `scripts/demo.sh --clean` removes the container (and, with a
# non-default prefix, that prefix's images).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
version=$(awk -F'"' '/^vllm_version:/{print $2}' roles/vllm_service/defaults/main.yml)
prefix=${DEMO_IMAGE_PREFIX:-llmops}
export LLMOPS_DEMO_NODE=${DEMO_NODE:-llmops-demo}
export LLMOPS_BASE_IMAGE=$prefix/debian-systemd:bookworm
export LLMOPS_VLLM_IMAGE=$prefix/vllm-node:$version
export LLMOPS_IMGBUILD_NODE=${LLMOPS_DEMO_NODE}-imgbuild
t_start=$(date +%s)

# step NAME CMD...: run CMD with its output, a line every 20 s while it runs
# (pip and debootstrap are silent for minutes), and its time at the end.
timings=()
step() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  echo "demo: == $name"
  ( while sleep 20; do echo "demo:    ... $name: $(( $(date +%s) - t0 )) s"; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  timings+=("$name: $(( $(date +%s) - t0 )) s")
  [ $rc -eq 0 ] || { echo "demo: $name FAILED (rc $rc)" >&2; exit $rc; }
}

if [ "${1:-}" = "--clean" ]; then
  docker rm -f "$LLMOPS_DEMO_NODE" "$LLMOPS_IMGBUILD_NODE" >/dev/null 2>&1 || true
  if [ "$prefix" != llmops ]; then
    docker image rm "$LLMOPS_VLLM_IMAGE" "$LLMOPS_BASE_IMAGE" >/dev/null 2>&1 || true
  fi
  echo "demo: removed container $LLMOPS_DEMO_NODE$([ "$prefix" = llmops ] && echo " (the shared llmops/* images are kept)")"
  exit 0
fi

if [ -n "${DEMO_ON_HOST:-}" ]; then
  [ "$(ps -p 1 -o comm= 2>/dev/null)" = "systemd" ] || {
    echo "demo: DEMO_ON_HOST needs systemd as PID 1 here; use \`make demo\` (a container)" >&2; exit 1; }
  inv=inventories/localhost
  echo "demo: deploying onto THIS machine ($inv): apt packages, user vllm, vllm@default on :8000"
  step "tools venv (.venv)" make -s venv
else
  inv=inventories/local
  echo "demo: deploying into the local systemd container '$LLMOPS_DEMO_NODE' ($inv; \`make demo-host\` targets this machine)"
  # The test bed (apt packages, dockerd, the Debian base image) is built while
  # the tools venv installs: both mostly wait on downloads.
  mkdir -p .cache
  bedlog=.cache/demo-testbed.log
  LLMOPS_SKIP_VLLM_IMAGE=1 scripts/testbed/setup.sh >"$bedlog" 2>&1 &
  bed=$!
  wait_bed() { local rc=0; wait "$bed" || rc=$?; sed 's/^/demo:    testbed: /' "$bedlog"; return $rc; }
  step "tools venv (.venv; the test bed builds meanwhile)" make -s venv
  step "test bed (packages, dockerd, $LLMOPS_BASE_IMAGE)" wait_bed
  node_image=$LLMOPS_BASE_IMAGE
  if docker image inspect "$LLMOPS_VLLM_IMAGE" >/dev/null 2>&1; then
    node_image=$LLMOPS_VLLM_IMAGE
  else
    echo "demo: no $LLMOPS_VLLM_IMAGE: site.yml installs vLLM into the node (once; a few minutes)"
  fi
  step "start $LLMOPS_DEMO_NODE from $node_image" scripts/testbed/start-node.sh "$LLMOPS_DEMO_NODE" "$node_image"
fi
# Asked once the venv exists (make evaluated it before): the staged collection
# and the venv's bundled collections (community.docker: the node's connection).
ANSIBLE_COLLECTIONS_PATH=$PWD/.cache/collections:$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH
step "site.yml" ansible-playbook site.yml -i "$inv" "$@"
printf 'demo: %s\n' "${timings[@]}"
echo "demo: total $(( $(date +%s) - t_start )) s. Run it again: changed=0. Remove the container: make demo-clean"
