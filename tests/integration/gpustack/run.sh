#!/usr/bin/env bash
# Live test of llmops.serving.gpustack (pip method) and the gpustack_* modules
# against a REAL GPUStack 2.3.0 server and a REAL PostgreSQL, both inside one
# network namespace that has only loopback (GPUStack binds 0.0.0.0 with the
# gateway disabled). The namespace is a systemd container started with
# `--network none` (systemd is PID 1 there, so the role manages gpustack.service
# for real); PostgreSQL runs from the host's Debian package inside that same
# namespace (nsenter -n). Ansible reaches the container with docker exec.
#
# Needs: root, docker daemon, image llmops/debian-systemd:bookworm
# (scripts/testbed/build-base-image.sh), network to PyPI for the first venv build.
# Usage: tests/integration/gpustack/run.sh      (exit 0 = all checks passed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cd "$repo"
export PATH=${LLMOPS_VENV:-$repo/.venv}/bin:$PATH
export ANSIBLE_CONFIG=$repo/ansible.cfg
image=${LLMOPS_BASE_IMAGE:-llmops/debian-systemd:bookworm}
venv=${LLMOPS_GPUSTACK_VENV:-$repo/.cache/gpustack-venv-deb}      # built with Debian's python3.11, bind-mounted at the same path
name=gpustack-live-$$
pgdata=$(mktemp -d /tmp/gpustack-live-pg.XXXXXX)
out=$(mktemp -d /tmp/gpustack-live-out.XXXXXX)
t0=$(date +%s)
step() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

cleanup() {
  set +e
  if [ -n "${pid:-}" ]; then nsenter -t "$pid" -n su postgres -s /bin/sh -c "pg_ctl -D $pgdata/db -m immediate stop" >/dev/null 2>&1; fi
  docker rm -f "$name" >/dev/null 2>&1
  rm -rf "$pgdata"
  step "cleaned up (logs kept in $out)"
}
trap cleanup EXIT

step "prerequisites"
# Newest /usr/lib/postgresql/<version>/bin, empty when none.
pg_bin_dir() { local d; for d in /usr/lib/postgresql/*/bin; do if [ -d "$d" ]; then echo "$d"; fi; done | sort -V | tail -1; }
pgbin=$(pg_bin_dir)
if [ -z "$pgbin" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  pgbin=$(pg_bin_dir)
fi
if [ ! -x "$venv/bin/gpustack" ]; then
  step "building $venv (pip install gpustack==2.3.0, about 1-4 min of network, 909 MB)"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q gpustack==2.3.0
fi
# `run.sh venv`: only the venv (CI builds it in the background, beside the lint stages).
[ "${1:-}" = venv ] && { trap - EXIT; rm -rf "$pgdata" "$out"; step "venv ready: $venv"; exit 0; }
docker image inspect "$image" >/dev/null
make -s stage

step "namespace: container $name with --network none (loopback only)"
docker run -d --name "$name" --hostname gs-server --network none \
  --cap-add SYS_ADMIN --security-opt seccomp=unconfined --cgroupns host \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock \
  -v "$venv:$venv:ro" "$image" /lib/systemd/systemd >/dev/null
pid=$(docker inspect -f '{{.State.Pid}}' "$name")
nsenter -t "$pid" -n ip -o link | awk '{print $2}' | tr '\n' ' ' | sed 's/^/  interfaces: /'; echo

step "PostgreSQL inside the namespace (127.0.0.1:55432, trust)"
chown postgres "$pgdata"
su postgres -s /bin/sh -c "$pgbin/initdb -A trust -U postgres -D $pgdata/db" >/dev/null
nsenter -t "$pid" -n su postgres -s /bin/sh -c \
  "$pgbin/pg_ctl -D $pgdata/db -l $pgdata/pg.log -o '-c listen_addresses=127.0.0.1 -p 55432 -k $pgdata' -w start" >/dev/null
nsenter -t "$pid" -n su postgres -s /bin/sh -c "$pgbin/createdb -h 127.0.0.1 -p 55432 gpustack"

cat > "$out/inventory.yml" <<INV
all:
  children:
    gpustack_server:
      hosts:
        $name:
          ansible_connection: community.docker.docker
          ansible_python_interpreter: /usr/bin/python3
    gpustack_worker:
      hosts: {}
INV
vars=(-e "@$here/vars.yml" -e "gpustack_venv=$venv")
play() { ansible-playbook -i "$out/inventory.yml" "${vars[@]}" "$@"; }

step "playbooks/gpustack.yml with empty groups is a no-op"
printf 'all:\n  hosts:\n    localhost:\n      ansible_connection: local\n' > "$out/empty.yml"
ansible-playbook -i "$out/empty.yml" "$here/site_noop.yml" > "$out/noop.log" 2>&1
grep -q "ok=" "$out/noop.log" && { echo "FAIL: playbooks/gpustack.yml ran tasks with empty groups"; exit 1; }

step "check mode on the never-converged host (must not fail)"
play --check "$here/converge.yml" > "$out/check-fresh.log" 2>&1 || { tail -50 "$out/check-fresh.log"; exit 1; }

step "drift.yml --check on the never-converged host (exit 2, rows, nothing changed)"
# drift.yml inventory: the container in gpustack_server, an empty vllm group (the vLLM play matches no host).
sed 's/^    gpustack_worker:/    vllm:\n      hosts: {}\n    gpustack_worker:/' "$out/inventory.yml" > "$out/inventory-drift.yml"
dvars=(-e "@$here/drift_vars.yml")
dplay() { ansible-playbook -i "$out/inventory-drift.yml" "${vars[@]}" "${dvars[@]}" "$@"; }
# rows of the newest drift.json under $1 as "host|component|instance|found" lines
drift_rows() { python3 -c '
import glob, json, sys
r = json.load(open(sorted(glob.glob(sys.argv[1] + "/*/drift.json"))[-1]))
for row in r["drift"]:
    print("%s|%s|%s|%s" % (row["host"], row["component"], row["instance"], row["found"]))
' "$1"; }
rc=0; dplay --check playbooks/drift.yml -e "drift_report_dir=$out/drift-fresh" > "$out/drift-fresh.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { tail -40 "$out/drift-fresh.log"; echo "FAIL: drift.yml exit $rc on a never-converged host (want 2)"; exit 1; }
drift_rows "$out/drift-fresh" | tee "$out/drift-fresh.rows"
want=$(cat <<ROWS
$name|gpustack_config|None|missing
$name|gpustack_model|drift-a|not checked (the server did not answer)
$name|gpustack_model|drift-b|not checked (the server did not answer)
$name|gpustack_unit|None|missing
$name|service|None|unit not found
ROWS
)
[ "$(LC_ALL=C sort "$out/drift-fresh.rows")" = "$want" ] || { echo "FAIL: drift rows differ from:"; echo "$want"; exit 1; }
docker exec "$name" test ! -e /etc/gpustack/config.yaml || { echo "FAIL: drift.yml wrote config.yaml"; exit 1; }

# One converge: playbooks/gpustack.yml (the role, pip method, then the drift test models
# registered through the API). The no-op re-run (changed=0) is the last step's second run,
# on the host the drift steps edited and a run repaired.
step "converge (playbooks/gpustack.yml: role, pip method; registers the drift test models)"
dplay playbooks/gpustack.yml > "$out/converge1.log" 2>&1 || { tail -50 "$out/converge1.log"; exit 1; }
grep -A3 "PLAY RECAP" "$out/converge1.log"
step "check mode on the converged host (must be changed=0)"
dplay --check --diff playbooks/gpustack.yml > "$out/check.log" 2>&1 || { tail -50 "$out/check.log"; exit 1; }
grep -E "changed=0 .*failed=0" "$out/check.log" >/dev/null || { echo "FAIL: check mode reports changes"; exit 1; }

step "config validation (unknown + fictional keys, types, enums)"
play "$here/test_config.yml" > "$out/config.log" 2>&1 || { tail -60 "$out/config.log"; exit 1; }
grep -A3 "PLAY RECAP" "$out/config.log"

step "gpustack_model / gpustack_model_info / gpustack_api_key against the live server"
play -v "$here/test_models.yml" > "$out/models.log" 2>&1 || { tail -80 "$out/models.log"; exit 1; }
grep -A3 "PLAY RECAP" "$out/models.log"

step "drift: converged host -> drift.yml --check exits 0, empty report"
rc=0; dplay --check playbooks/drift.yml -e "drift_report_dir=$out/drift-clean" > "$out/drift-clean.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -40 "$out/drift-clean.log"; echo "FAIL: drift.yml exit $rc on a converged host"; exit 1; }
[ -z "$(drift_rows "$out/drift-clean")" ] || { drift_rows "$out/drift-clean"; echo "FAIL: rows on a converged host"; exit 1; }
python3 -c 'import glob,json,sys; r=json.load(open(glob.glob(sys.argv[1]+"/*/drift.json")[0])); assert set(r["components_checked"]) == {"gpustack","gpustack_models","leftovers"}, r' "$out/drift-clean"

step "drift: by hand (unit RestartSec, config.yaml line, service disabled, drift-a replicas 2, drift-b deleted)"
dplay "$here/drift_introduce.yml" > "$out/drift-introduce.log" 2>&1 || { tail -40 "$out/drift-introduce.log"; exit 1; }
if [ -n "${LLMOPS_DRIFT_CAPTURE:-}" ]; then
  dplay "$here/drift_capture.yml" -e "capture_dir=$LLMOPS_DRIFT_CAPTURE" -e capture_label=drifted > "$out/drift-capture.log" 2>&1 || { tail -40 "$out/drift-capture.log"; exit 1; }
fi

step "drift: drift.yml --check exits 2 and lists exactly those rows"
rc=0; dplay --check playbooks/drift.yml -e "drift_report_dir=$out/drift-found" > "$out/drift-found.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { tail -40 "$out/drift-found.log"; echo "FAIL: drift.yml exit $rc (want 2)"; exit 1; }
drift_rows "$out/drift-found" | tee "$out/drift-found.rows"
want=$(cat <<ROWS
$name|gpustack_config|None|hand-edited (differs from the rendered template; lines not shown, the file holds secrets)
$name|gpustack_model|drift-a|replicas=2
$name|gpustack_model|drift-b|not registered
$name|gpustack_unit|None|hand-edited (differs from the rendered template)
$name|service_enabled|None|disabled
ROWS
)
[ "$(LC_ALL=C sort "$out/drift-found.rows")" = "$want" ] || { echo "FAIL: drift rows differ from:"; echo "$want"; exit 1; }
python3 - "$out/drift-found" <<'PY'
import glob, json, sys
d = sorted(glob.glob(sys.argv[1] + "/*/"))[-1]
rows = {(r["component"], r["instance"]): r for r in json.load(open(d + "drift.json"))["drift"]}
assert rows[("gpustack_unit", None)]["detail"] == ["-RestartSec=30", "+RestartSec=5"], rows[("gpustack_unit", None)]
assert rows[("gpustack_config", None)]["detail"] == [], "config.yaml lines must never be shown"
assert rows[("gpustack_model", "drift-a")]["expected"] == "replicas=1", rows[("gpustack_model", "drift-a")]
assert "drift-b" in open(d + "drift.txt").read()
PY

step "drift: gpustack.yml --check --diff names the drift and changes nothing"
dplay --check --diff playbooks/gpustack.yml > "$out/drift-checkdiff.log" 2>&1 || { tail -40 "$out/drift-checkdiff.log"; exit 1; }
# a task is named when a "changed:" line follows its TASK header (diff lines may come between)
task_changed() { awk -v t="$1" '/^TASK \[/{intask = index($0, t) > 0} intask && /^changed: /{found=1} END{exit !found}' "$2"; }
for t in "Render config.yaml" "Systemd unit" "Enable and start gpustack" "Register each model"; do
  task_changed "$t" "$out/drift-checkdiff.log" || { echo "FAIL: --check --diff does not name '$t'"; exit 1; }
done
docker exec "$name" grep -q '^RestartSec=30$' /etc/systemd/system/gpustack.service
docker exec "$name" grep -q '^# hand edit: drift test$' /etc/gpustack/config.yaml
[ "$(docker exec "$name" systemctl is-enabled gpustack || true)" = disabled ] || { echo "FAIL: check mode enabled the service"; exit 1; }

step "drift: a converge run corrects it, the next run is changed=0 (idempotence), drift.yml exits 0"
dplay playbooks/gpustack.yml > "$out/drift-fix.log" 2>&1 || { tail -50 "$out/drift-fix.log"; exit 1; }
grep -A3 "PLAY RECAP" "$out/drift-fix.log"
dplay playbooks/gpustack.yml > "$out/drift-fix2.log" 2>&1 || { tail -50 "$out/drift-fix2.log"; exit 1; }
grep -E "changed=0 .*failed=0" "$out/drift-fix2.log" >/dev/null || { grep -A3 "PLAY RECAP" "$out/drift-fix2.log"; echo "FAIL: re-run after the fix changed something"; exit 1; }
rc=0; dplay --check playbooks/drift.yml -e "drift_report_dir=$out/drift-fixed" > "$out/drift-fixed.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -40 "$out/drift-fixed.log"; echo "FAIL: drift.yml exit $rc after the fix"; exit 1; }
if [ -n "${LLMOPS_DRIFT_CAPTURE:-}" ]; then
  dplay "$here/drift_capture.yml" -e "capture_dir=$LLMOPS_DRIFT_CAPTURE" -e capture_label=converged > "$out/drift-capture2.log" 2>&1 || { tail -40 "$out/drift-capture2.log"; exit 1; }
fi

step "secrets never in the output"
key=$(awk -F'"' '/^gpustack_api_key:/{print $2}' "$here/vars.yml")
pw=$(awk -F'"' '/^gpustack_bootstrap_password:/{print $2}' "$here/vars.yml")
if grep -rlF -e "$key" -e "$pw" "$out"; then echo "FAIL: a secret leaked into the output"; exit 1; fi
step "PASS (total $(( $(date +%s) - t0 ))s)"
