#!/usr/bin/env bash
# Prepare everything the molecule scenarios and the demo need on this machine:
# Debian packages (docker.io, debootstrap), a docker daemon that touches no host
# networking, the systemd base image and the shared vLLM node image.
# Idempotent; each step is skipped when its result is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "testbed: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
"$here/start-dockerd.sh"
t0=$(date +%s)
"$here/build-base-image.sh"
t1=$(date +%s)
# The demo builds no vLLM image of its own (it installs vLLM once, in its node).
[ -n "${LLMOPS_SKIP_VLLM_IMAGE:-}" ] || "$here/build-vllm-image.sh"
t2=$(date +%s)
echo "testbed: base image $((t1 - t0)) s, vllm image $((t2 - t1)) s"
