#!/usr/bin/env bash
# The device side of docs/h200.md. Runs on the H200 machine in the root of the
# checkout that the device tool sent, with the carried .h200/ folders (docs/h200.md, the route by hand).
#   bash scripts/h200/gpu-run.sh probe      what the machine is (GPU, PID 1, systemd)
#   bash scripts/h200/gpu-run.sh go [N]     receive part N, install, then gpu_run.py
#                                        steps until ~40 s before the 600 s limit
# Results: $OUT/gpurun.tar.gz (everything) and $OUT/summary.json.
set -uo pipefail
START=$(date +%s)
LIMIT=${LIMIT:-560}
BIN=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpurun-out}
mkdir -p "$OUT" /tmp/gpurun/out
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8

probe() {
  echo "== GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,memory.free --format=csv
  echo "== kernel"; uname -a; nproc; free -g | head -2
  echo "== PID 1"; ps -o pid,comm,args -p 1 2>/dev/null || tr '\0' ' ' </proc/1/cmdline; echo
  ls -l /proc/1/exe 2>&1; cat /proc/1/comm
  echo "== systemd binaries"
  for b in systemctl systemd systemd-run journalctl unshare nsenter; do echo "$b: $(command -v $b || echo -)"; done
  ls -l /lib/systemd/systemd /usr/lib/systemd/systemd /sbin/init 2>&1
  [ -d /run/systemd/system ] && echo "/run/systemd/system exists (systemd is the init)" || echo "/run/systemd/system: absent"
  echo "== cgroups"; stat -fc %T /sys/fs/cgroup 2>&1; cat /proc/self/cgroup; mount | grep -E 'cgroup|/proc |/sys ' | head
  echo "== namespaces"; unshare --pid --fork --mount-proc true 2>&1 && echo "unshare --pid --fork --mount-proc: ok"
  echo "== devices"; find /dev -maxdepth 2 -name "nvidia*" -exec ls -ld {} + 2>&1 | head -20
  echo "== seccomp/caps"; grep -E 'Seccomp|CapEff|NoNewPrivs' /proc/self/status
  echo "== python"; command -v python3; python3 -V; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
  echo "== disk"; df -h /tmp | tail -1
}

case ${1:-} in
  probe) probe 2>&1 | tee "$OUT/probe.txt" ;;
  go)
    [ -n "${2:-}" ] && { bash "$BIN/stage.sh" receive "$2" || exit $?; }
    T=$(date +%s)
    SITE=/tmp/site bash "$BIN/stage.sh" install --pieces 2>&1 | tee /tmp/gpurun/out/install.txt
    [ "${PIPESTATUS[0]}" = 0 ] || exit 6
    echo "install step: $(( $(date +%s) - T )) s" | tee -a /tmp/gpurun/out/install.txt
    export PYTHONPATH=/tmp/site
    python3 "$BIN/gpu_run.py" $((START + LIMIT))
    rc=$?
    cp /tmp/gpurun/state.json "$OUT/summary.json" 2>/dev/null
    tar -C /tmp/gpurun -czf "$OUT/gpurun.tar.gz" out state.json
    ls -la "$OUT"
    exit $rc ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
