#!/usr/bin/env bash
# Start (or reuse) a container with systemd as PID 1 that Ansible can target
# with the community.docker.docker connection. Flags: see docs/testbed.md.
# usage: start-node.sh NAME [IMAGE]
set -euo pipefail
name=${1:?usage: start-node.sh NAME [IMAGE]}
image=${2:-${LLMOPS_NODE_IMAGE:-llmops/debian-systemd:bookworm}}
if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null || true)" = "true" ]; then
  echo "node $name: running"
  exit 0
fi
docker rm -f "$name" >/dev/null 2>&1 || true
extra=()
[ -d /opt/wheels ] && extra+=(-v /opt/wheels:/opt/wheels:ro -e PIP_FIND_LINKS=/opt/wheels)
[ -f /etc/ssl/certs/ca-certificates.crt ] && extra+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
docker run -d --name "$name" --hostname "$name" \
  --network host --cgroupns host \
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
