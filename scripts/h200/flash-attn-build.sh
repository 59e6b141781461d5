#!/usr/bin/env bash
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
#
# Real flash-attn build on the H200 machine (no network), in calls of < 10 min.
# Runs the SAME build script as the flash_attn role (roles/flash_attn/files/build-flash-attn.sh)
# with the SAME rules (plugins/module_utils/flash_attn.py: archs, MAX_JOBS, NVCC_THREADS,
# build key) and the SAME probe code as llmops.serving.flash_attn_info (PROBE_SCRIPT).
#
#   scripts/h200/flash-attn-build.sh start          # detached (setsid) build, returns at once
#   scripts/h200/flash-attn-build.sh poll [SECONDS] # print [N/M] progress until the wheel exists (default 540 s)
#   scripts/h200/flash-attn-build.sh verify         # install wheel, cuobjdump, numeric check -> $OUT/*.json
#   scripts/h200/flash-attn-build.sh status         # one progress line
#   scripts/h200/flash-attn-build.sh role           # (ansible-core carried) the role itself, cache pre-seeded
#                                                   # with the wheel built above: install + verify, run twice
#
# Environment (all optional): FA_PYTHON (/opt/torch/.venv/bin/python), FA_SDIST
# (.whl/flash_attn-2.8.3.post2.tar.gz), FA_WORK (/tmp/fa-build), FA_ARCHS (derived from
# nvidia-smi compute_cap), MAX_JOBS / NVCC_THREADS (default: the role's rule),
# FA_PER_JOB_GB (9), CUDA_HOME (/usr/local/cuda), OUT (results folder).
set -u
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${FA_PYTHON:-/opt/torch/.venv/bin/python}"
SDIST="${FA_SDIST:-$HERE/.whl/flash_attn-2.8.3.post2.tar.gz}"
WORK="${FA_WORK:-/tmp/fa-build}"
LOG="$WORK/log"
WHEELS="$WORK/wheels"
STATUS="$WORK/build.status"
FAU="$HERE/plugins/module_utils/flash_attn.py"
BUILD_SH="$HERE/roles/flash_attn/files/build-flash-attn.sh"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
OUTDIR="${OUT:-$WORK/out}"
mkdir -p "$WORK" "$OUTDIR"

fau() { "$PY" "$FAU" "$@"; }
probe() { (cd "$WORK" && "$PY" -c "$(fau probe-script)" "${1:-{\}}"); }

progress_line() {
  local p; p=$(fau progress "$LOG" 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("%s/%s objects (%s%%)" % (d["built"], d["total"] or "?", d["percent"]))' 2>/dev/null)
  local peak; peak=$(cat "$WORK/mem.peak_gb" 2>/dev/null || echo "?")
  local t0; t0=$(cat "$WORK/start.epoch" 2>/dev/null || date +%s)
  echo "$(date +%H:%M:%S) progress=$p elapsed=$(( $(date +%s) - t0 ))s peak_used_ram_gb=$peak"
}

cmd_start() {
  if [ -f "$WORK/build.pid" ] && kill -0 "$(cat "$WORK/build.pid")" 2>/dev/null && [ ! -f "$STATUS" ]; then
    echo "build already running (pid $(cat "$WORK/build.pid"))"; progress_line; return 0
  fi
  if [ -z "${FA_REBUILD:-}" ] && grep -qs '^rc=0 ' "$STATUS" && ls "$WHEELS"/flash_attn-*.whl > /dev/null 2>&1; then
    echo "already built: $(cat "$STATUS"), $(ls "$WHEELS"); FA_REBUILD=1 to build again"; return 0
  fi
  [ -f "$SDIST" ] || { echo "ERROR: sdist $SDIST not found (set FA_SDIST)"; return 1; }
  [ -x "$PY" ] || { echo "ERROR: python $PY not found (set FA_PYTHON)"; return 1; }
  local archs
  if [ -n "${FA_ARCHS:-}" ]; then
    archs=$(fau archs "$FA_ARCHS") || return 1
  else
    # shellcheck disable=SC2046
    archs=$(fau derive $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader)) || return 1
  fi
  local cores mem_gb jobs threads
  cores=$(nproc)
  mem_gb=$(awk '/MemAvailable/ {printf "%.1f", $2/1048576}' /proc/meminfo)
  jobs="${MAX_JOBS:-$(fau max-jobs "$cores" "$mem_gb" "${FA_PER_JOB_GB:-9}")}"
  threads="${NVCC_THREADS:-$(fau nvcc-threads "$archs" "$jobs" "$cores")}"
  local facts; facts=$(probe '{}' | sed -n 's/^FLASH_ATTN_PROBE=//p')
  local key
  key=$(echo "$facts" | "$PY" -c '
import json, sys, subprocess
f = json.load(sys.stdin)
print(subprocess.check_output([sys.executable, sys.argv[1], "key", sys.argv[2], f["torch_version"], f["torch_cuda"] or "none",
      f["python_tag"], sys.argv[3], str(f["cxx11_abi"])], text=True).strip())' "$FAU" "$(basename "$SDIST" | sed -E 's/^flash_attn-(.*)\.tar\.gz$/\1/')" "$archs")
  rm -rf "$WHEELS" "$STATUS" "$WORK/mem.peak_gb" "$WORK/build.pid"
  date +%s > "$WORK/start.epoch"
  cat > "$WORK/start.json" <<JSON
{"archs": "$archs", "max_jobs": $jobs, "nvcc_threads": $threads, "cores": $cores, "mem_available_gb": $mem_gb,
 "per_job_gb": ${FA_PER_JOB_GB:-9}, "sdist": "$SDIST", "python": "$PY", "cuda_home": "$CUDA_HOME",
 "max_jobs_from_env": "${MAX_JOBS:-}", "nvcc_threads_from_env": "${NVCC_THREADS:-}", "key": $key}
JSON
  cp "$WORK/start.json" "$OUTDIR/"
  cat "$WORK/start.json"
  setsid nohup bash "$BUILD_SH" --python "$PY" --source "$SDIST" --wheel-dir "$WHEELS" --log "$LOG" \
    --archs "$archs" --max-jobs "$jobs" --nvcc-threads "$threads" --cuda-home "$CUDA_HOME" \
    > "$WORK/launcher.out" 2>&1 < /dev/null &
  echo $! > "$WORK/build.pid"
  # Peak used RAM sampler (MemTotal - MemAvailable), stops when the build is done.
  # shellcheck disable=SC2016 # the sampler script expands its own variables
  setsid nohup bash -c '
    peak=0
    while [ ! -f "$1" ]; do
      used=$(awk "/MemTotal/ {t=\$2} /MemAvailable/ {a=\$2} END {printf \"%d\", (t-a)/1048576}" /proc/meminfo)
      [ "$used" -gt "$peak" ] && peak=$used && echo "$peak" > "$2"
      sleep 5
    done' _ "$STATUS" "$WORK/mem.peak_gb" > /dev/null 2>&1 < /dev/null &
  sleep 5
  echo "started build pid $(cat "$WORK/build.pid"), log $LOG"
  progress_line
}

cmd_poll() {
  local limit="${1:-540}" t0 last=""
  t0=$(date +%s)
  [ -f "$WORK/build.pid" ] || { echo "ERROR: no build started in $WORK (run start first)"; return 1; }
  while :; do
    if [ -f "$STATUS" ]; then
      echo "build finished: $(cat "$STATUS")"; progress_line
      ls -l "$WHEELS" 2>/dev/null
      tail -n 5 "$LOG"
      cp "$STATUS" "$OUTDIR/" 2>/dev/null
      grep -q '^rc=0 ' "$STATUS"; return $?
    fi
    local line; line=$(progress_line)
    local p="${line#* }"; p="${p%% elapsed=*}"
    if [ "$p" != "$last" ]; then echo "$line"; last="$p"; fi
    if ! kill -0 "$(cat "$WORK/build.pid")" 2>/dev/null && [ ! -f "$STATUS" ]; then
      echo "ERROR: build process $(cat "$WORK/build.pid") is gone without a status (machine restarted?)"; tail -n 20 "$LOG"; return 1
    fi
    if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then
      echo "still building after this poll window ($limit s): $line"; return 0
    fi
    sleep 15
  done
}

cmd_verify() {
  local whl; whl=$(find "$WHEELS" -maxdepth 1 -name 'flash_attn-*.whl' 2>/dev/null | sort | head -n1)
  [ -n "$whl" ] || { echo "ERROR: no wheel in $WHEELS (build not finished?)"; return 1; }
  local sha; sha=$(sha256sum "$whl" | cut -d' ' -f1)
  local t0 t1
  t0=$(date +%s.%N)
  "$PY" -m pip install --no-deps --force-reinstall --no-index "$whl" > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; return 1; }
  t1=$(date +%s.%N)
  local facts; facts=$(probe '{"numeric_check": true, "head_dims": [64, 128]}' | sed -n 's/^FLASH_ATTN_PROBE=//p')
  local so; so=$(echo "$facts" | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("extension") or "")')
  local cuobj="$CUDA_HOME/bin/cuobjdump"; command -v cuobjdump > /dev/null && cuobj=$(command -v cuobjdump)
  "$cuobj" --list-elf "$so" > "$WORK/cuobjdump-list-elf.txt" 2>&1
  cp "$WORK/cuobjdump-list-elf.txt" "$OUTDIR/" 2>/dev/null
  gzip -c "$LOG" > "$OUTDIR/build-log.txt.gz" 2>/dev/null
  "$PY" - "$FAU" "$WORK" "$whl" "$sha" "$t0" "$t1" "$facts" > "$OUTDIR/flash-attn-verify.json" <<'PYEOF'
import importlib.util, json, os, sys
fau_path, work, whl, sha, t0, t1, facts = sys.argv[1:8]
spec = importlib.util.spec_from_file_location("llmops_flash_attn_utils", fau_path)
fau = importlib.util.module_from_spec(spec); spec.loader.exec_module(fau)
start = json.load(open(os.path.join(work, "start.json")))
status = open(os.path.join(work, "build.status")).read().strip()
cubins = fau.parse_list_elf(open(os.path.join(work, "cuobjdump-list-elf.txt")).read())
requested = fau.validate_archs(start["archs"])
facts = json.loads(facts)
try:
    peak = int(open(os.path.join(work, "mem.peak_gb")).read())
except (OSError, ValueError):
    peak = None
log = open(os.path.join(work, "log"), errors="replace").read()
num = facts.get("numeric", {})
res = {
    "start": start, "build_status": status,
    "build_seconds": int(status.split("seconds=")[1]) if "seconds=" in status else None,
    "progress_final": fau.parse_progress(log), "peak_used_ram_gb": peak,
    "wheel": os.path.basename(whl), "wheel_bytes": os.path.getsize(whl), "wheel_sha256": sha,
    "install_seconds": round(float(t1) - float(t0), 2),
    "facts": facts, "cubins": cubins, "cubins_total": sum(cubins.values()),
    "missing_archs": fau.missing_archs(requested, cubins),
    "numeric_max_rel_error": num.get("max_rel_error"),
    "numeric_ok": bool(num.get("ran")) and num.get("max_rel_error", 1.0) < 1e-2,
}
res["ok"] = (not res["missing_archs"]) and res["numeric_ok"] and res["facts"].get("flash_attn_version") is not None
print(json.dumps(res, indent=1, sort_keys=True))
PYEOF
  cat "$OUTDIR/flash-attn-verify.json"
  "$PY" -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUTDIR/flash-attn-verify.json"
}

cmd_role() {
  # The role itself, against a cache pre-seeded with the wheel `start` built (cache hit:
  # install + verify only; a real role build would not fit in one 10-minute call).
  local ap="${FA_ANSIBLE_PLAYBOOK:-ansible-playbook}"
  command -v "$ap" > /dev/null || { echo "ERROR: $ap not found (carry ansible-core, set FA_ANSIBLE_PLAYBOOK)"; return 1; }
  local whl; whl=$(find "$WHEELS" -maxdepth 1 -name 'flash_attn-*.whl' 2>/dev/null | sort | head -n1)
  [ -n "$whl" ] || { echo "ERROR: no wheel in $WHEELS (run start/poll first)"; return 1; }
  local kid; kid=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["key"]["id"])' "$WORK/start.json")
  mkdir -p "$WORK/cache/$kid" "$WORK/collections/ansible_collections/llmops"
  ln -sfn "$HERE" "$WORK/collections/ansible_collections/llmops/serving"
  cp "$whl" "$WORK/cache/$kid/"
  (cd "$WORK/cache/$kid" && sha256sum "$(basename "$whl")" > "$(basename "$whl").sha256")
  printf '[defaults]\nstdout_callback = default\ncallback_result_format = yaml\nretry_files_enabled = false\n' > "$WORK/ansible.cfg"
  local rc=0 i
  for i in 1 2; do
    FA_VENV="$(dirname "$(dirname "$PY")")" FA_WORK="$WORK" FA_SDIST="$SDIST" FA_OUT="$OUTDIR" CUDA_HOME="$CUDA_HOME" \
      ANSIBLE_COLLECTIONS_PATH="$WORK/collections" ANSIBLE_CONFIG="$WORK/ansible.cfg" \
      ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false \
      "$ap" "$HERE/scripts/h200/flash-attn-role.yml" > "$OUTDIR/role-run$i.log" 2>&1 || rc=$?
    echo "== role run $i (rc=$rc)"; grep -E "^ +msg: '(NOTICE|flash-attn)|fatal|FAILED|: ok=" "$OUTDIR/role-run$i.log" | tail -n 12
    [ "$rc" = 0 ] || return "$rc"
  done
  cat "$OUTDIR/flash-attn-role-result.json"
}

case "${1:-}" in
  start) cmd_start ;;
  poll) cmd_poll "${2:-540}" ;;
  status) progress_line; cat "$STATUS" 2>/dev/null ;;
  verify) cmd_verify ;;
  role) cmd_role ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
