#!/usr/bin/env bash
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
#
# Build one flash-attn wheel from source. Used verbatim by the flash_attn role
# (copied to the builder host and run async) and by scripts/h200/flash-attn-build.sh.
#
# usage: build-flash-attn.sh --python PY --source SDIST_OR_REQ --wheel-dir DIR --log FILE
#                            --archs "90" --max-jobs N --nvcc-threads N [--cuda-home DIR]
# Writes FILE (pip -v output, ninja "[N/M]" lines) and DIR/../build.status
# ("rc=<rc> seconds=<s>") when done. Proxy variables are inherited from the caller.
set -u
PY="" SOURCE="" WHEEL_DIR="" LOG="" ARCHS="" JOBS="" THREADS="" CUDA_HOME_ARG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --source) SOURCE="$2"; shift 2 ;;
    --wheel-dir) WHEEL_DIR="$2"; shift 2 ;;
    --log) LOG="$2"; shift 2 ;;
    --archs) ARCHS="$2"; shift 2 ;;
    --max-jobs) JOBS="$2"; shift 2 ;;
    --nvcc-threads) THREADS="$2"; shift 2 ;;
    --cuda-home) CUDA_HOME_ARG="$2"; shift 2 ;;
    *) echo "build-flash-attn.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in PY SOURCE WHEEL_DIR LOG ARCHS JOBS THREADS; do
  if [ -z "${!v}" ]; then echo "build-flash-attn.sh: missing --$(echo "$v" | tr 'A-Z_' 'a-z-')" >&2; exit 2; fi
done
STATUS="$(dirname "$LOG")/build.status"
mkdir -p "$WHEEL_DIR" "$(dirname "$LOG")"
rm -f "$STATUS"
if [ -n "$CUDA_HOME_ARG" ]; then
  export CUDA_HOME="$CUDA_HOME_ARG"
  export PATH="$CUDA_HOME_ARG/bin:$PATH"
fi
export FLASH_ATTENTION_FORCE_BUILD=TRUE
export FLASH_ATTN_CUDA_ARCHS="$ARCHS"
export MAX_JOBS="$JOBS"
export NVCC_THREADS="$THREADS"
# The build runs from a scratch dir so a stray ./flash_attn never shadows anything.
cd "$(dirname "$LOG")" || exit 2
start=$(date +%s)
{
  echo "# flash-attn build started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# FLASH_ATTENTION_FORCE_BUILD=$FLASH_ATTENTION_FORCE_BUILD FLASH_ATTN_CUDA_ARCHS=$FLASH_ATTN_CUDA_ARCHS MAX_JOBS=$MAX_JOBS NVCC_THREADS=$NVCC_THREADS CUDA_HOME=${CUDA_HOME:-}"
  echo "# $PY -m pip wheel --no-build-isolation --no-deps --no-cache-dir -v -w $WHEEL_DIR $SOURCE"
} > "$LOG"
"$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir --no-binary flash-attn -v \
  -w "$WHEEL_DIR" "$SOURCE" >> "$LOG" 2>&1
rc=$?
end=$(date +%s)
echo "# flash-attn build finished rc=$rc after $((end - start)) s" >> "$LOG"
echo "rc=$rc seconds=$((end - start))" > "$STATUS"
exit $rc
