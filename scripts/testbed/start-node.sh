#!/usr/bin/env bash
# Start (or reuse) a container with systemd as PID 1 that Ansible can target
# with the community.docker.docker connection. Flags: see docs/testbed.md.
# usage: start-node.sh NAME [IMAGE]
# LLMOPS_NODE_NETWORK: host (default; the daemon has no bridge) or none (no
#   interface but lo: no index or mirror can be reached; Ansible still gets in
#   through docker exec).
# LLMOPS_WHEELS_DIR: mounted read-only and passed as PIP_FIND_LINKS (default
#   /opt/wheels where it exists); LLMOPS_WHEELS_DIR= (empty) mounts nothing.
set -euo pipefail
name=${1:?usage: start-node.sh NAME [IMAGE]}
image=${2:-${LLMOPS_NODE_IMAGE:-llmops/debian-systemd:bookworm}}
if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null || true)" = "true" ]; then
  echo "node $name: running"
  exit 0
fi
docker rm -f "$name" >/dev/null 2>&1 || true
network=${LLMOPS_NODE_NETWORK:-host}
case "$network" in host|none) ;; *) echo "start-node.sh: LLMOPS_NODE_NETWORK is host or none, not $network" >&2; exit 2;; esac
wheels=${LLMOPS_WHEELS_DIR-/opt/wheels}
extra=()
[ -n "$wheels" ] && [ -d "$wheels" ] && extra+=(-v "$wheels:$wheels:ro" -e "PIP_FIND_LINKS=$wheels")
[ -f /etc/ssl/certs/ca-certificates.crt ] && extra+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
docker run -d --name "$name" --hostname "$name" \
  --network "$network" --cgroupns host \
  --cap-add SYS_ADMIN --security-opt seccomp=unconfined \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
  --tmpfs /run --tmpfs /run/lock \
  "${extra[@]}" \
  "$image" /lib/systemd/systemd >/dev/null
for _ in $(seq 1 60); do
  state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
  case "$state" in running|degraded) echo "node $name: systemd $state"; exit 0;; esac
  sleep 0.5
done
echo "node $name: systemd did not come up (state: ${state:-unknown})" >&2
docker logs --tail 30 "$name" >&2 || true
exit 1
