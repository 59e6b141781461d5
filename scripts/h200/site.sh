#!/usr/bin/env bash
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
#
# The device side of docs/h200.md, "site.yml under systemd". Runs on the H200 machine in
# the root of the checkout the device tool sent, after `stage.sh receive 1..5`.
#   bash scripts/h200/site.sh probe        what the machine is (GPU, PID 1, sudo, venv, limits)
#   bash scripts/h200/site.sh early        after part 1: ansible-core, boot systemd, the preflight play
#   bash scripts/h200/site.sh go           after the last part: the wheelhouse, then the steps detached
#   bash scripts/h200/site.sh poll         follow the detached steps (the next call)
# Each call follows until LIMIT s (default 560) after it began, then leaves $OUT/site-run.tar.gz
# (logs, state.json, fixtures) and $OUT/state.json. The steps themselves run on (setsid) while
# the machine is held: chain the calls (the machine is kept only 30 s after one).
set -uo pipefail
START=$(date +%s)
LIMIT=${LIMIT:-560}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${H200_WORK:-/var/lib/llmops-h200/work}
OUT=${OUT:-$WORK/export}
mkdir -p "$OUT" "$WORK/out"
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8

probe() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  echo "PID 1: $(cat /proc/1/comm); kernel $(uname -r); cgroup fs $(stat -fc %T /sys/fs/cgroup)"
  echo "python3: $(command -v python3) $(python3 -V 2>&1); sudo: $(command -v sudo || echo none)"
  echo "ensurepip: $(python3 -c 'import ensurepip; print("yes")' 2>&1 | tail -1)"
  echo "nofile: soft $(ulimit -Sn) hard $(ulimit -Hn); fs.nr_open $(cat /proc/sys/fs/nr_open)"
  echo "useradd: $(command -v useradd || echo none); dpkg: $(command -v dpkg || echo none); gcc: $(command -v gcc || echo none)"
  stat -c '%A %U %n' /opt /opt/torch /opt/torch/.venv /opt/torch/.venv/lib/python3.12/site-packages 2>&1
  df -h /dev/shm | tail -1
  grep -i nvidia /proc/devices
  ls -l /dev/nvidia* /dev/nvidia-caps/* 2>&1
  df -h /tmp /var | tail -2
}

follow() {  # print the runner's new log lines until it ends or LIMIT
  local seen=0 n
  while :; do
    n=$(wc -l < "$WORK/out/site_run.txt" 2>/dev/null || echo 0)
    if [ "$n" -gt "$seen" ]; then sed -n "$((seen + 1)),${n}p" "$WORK/out/site_run.txt"; seen=$n; fi
    if ! kill -0 "$(cat "$WORK/runner.pid" 2>/dev/null)" 2>/dev/null; then echo "runner ended"; break; fi
    if [ $(( $(date +%s) - START )) -ge "$LIMIT" ]; then echo "call limit: the runner goes on (poll next)"; break; fi
    sleep 5
  done
  cp "$WORK/state.json" "$OUT/state.json" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/site-run.tar.gz" out state.json 2>/dev/null
  ls -la "$OUT"
}

case ${1:-} in
  probe) probe 2>&1 | tee "$OUT/probe.txt" ;;
  early)
    probe 2>&1 | tee "$OUT/probe.txt"
    T=$(date +%s)
    bash "$HERE/stage.sh" install --early || exit 6
    bash "$HERE/boot-systemd.sh" /var/lib/llmops-h200/stage/p1/debs || exit 7
    echo "install + boot: $(( $(date +%s) - T )) s"
    H200_STEPS=preflight python3 "$HERE/site_run.py" $(( START + LIMIT ))
    follow ;;
  go)
    T=$(date +%s)
    bash "$HERE/stage.sh" install || exit 6
    echo "install: $(( $(date +%s) - T )) s"
    bash "$HERE/boot-systemd.sh" /var/lib/llmops-h200/stage/p1/debs || exit 7
    if ! kill -0 "$(cat "$WORK/runner.pid" 2>/dev/null)" 2>/dev/null; then
      setsid nohup python3 "$HERE/site_run.py" $(( START + ${RUNNER_BUDGET:-1500} )) \
        > "$WORK/runner.out" 2>&1 < /dev/null &
      echo $! > "$WORK/runner.pid"
    fi
    follow ;;
  poll) follow ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
