#!/usr/bin/env bash
# `make demo`: deploy a real vLLM (CPU build) with site.yml and print the report.
#
# If PID 1 here is systemd, the target is this machine (inventories/localhost).
# Otherwise (containers, CI machines) the target is a local Debian container
# with systemd as PID 1, built from Debian packages (inventories/local): the
# same role, the same unit, the same readiness gate - only the host differs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
if [ "$(ps -p 1 -o comm= 2>/dev/null)" = "systemd" ] && [ -z "${LLMOPS_DEMO_CONTAINER:-}" ]; then
  inv=inventories/localhost
  echo "demo: PID 1 is systemd: deploying to this machine ($inv)"
else
  inv=inventories/local
  echo "demo: PID 1 is not systemd: deploying to a local systemd container 'llmops-demo' ($inv)"
  scripts/testbed/setup.sh
  LLMOPS_NODE_IMAGE=${LLMOPS_DEMO_IMAGE:-llmops/debian-systemd:bookworm} scripts/testbed/start-node.sh llmops-demo
fi
start=$(date +%s)
ansible-playbook site.yml -i "$inv" "$@"
echo "demo: site.yml took $(( $(date +%s) - start )) s. Re-run it: the second run reports changed=0."
