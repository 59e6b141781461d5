#!/usr/bin/env bash
# Start a docker daemon that touches no host networking (no bridge, no iptables,
# no forwarding, no masquerading). Containers then use network_mode: host.
# Idempotent: does nothing when a daemon already answers.
set -euo pipefail
if docker info >/dev/null 2>&1; then
  echo "dockerd: already running"
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "dockerd not found: apt-get install docker.io" >&2
  exit 1
fi
log=${DOCKERD_LOG:-/var/log/llmops-dockerd.log}
setsid dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
  >"$log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd: ready"
    exit 0
  fi
  sleep 0.5
done
echo "dockerd did not come up; last log lines:" >&2
tail -n 30 "$log" >&2
exit 1
