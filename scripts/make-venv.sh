#!/usr/bin/env bash
# `make venv`: the pinned tools venv (tests/requirements.txt) with any
# python3 >= 3.11. Debian/Ubuntu split `venv`/ensurepip into python3-venv
# (python3.X-venv): installed with apt when missing and we are root, else a
# clear message saying what to install.
# usage: make-venv.sh VENV_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
# Already there with every pin installed (a checkout newer than the stamp, a
# venv shared between worktrees): refresh the stamp only.
if [ -x "$venv/bin/python" ] && "$venv/bin/python" - tests/requirements.txt <<'PY'
import re, sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", line)
    if m:
        try:
            if version(m.group(1)) != m.group(2):
                sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
PY
then
  touch "$venv/.stamp"; exit 0
fi
# Not the venv's own python (make puts $venv/bin first on PATH).
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$PWD/$venv/bin" | paste -sd:)
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "make venv: $py not found: install python3 (3.11-3.13)" >&2; exit 1; }
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$py" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 13)))' || {
  echo "make venv: $py is Python $ver; the controller side supports 3.11-3.13 (set PYTHON=python3.X)" >&2; exit 1; }
if ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  pkg=python$ver-venv
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "make venv: $py has no ensurepip: installing $pkg with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "$pkg" >/dev/null
  else
    echo "make venv: $py has no ensurepip/venv: run \`sudo apt-get install $pkg\` (Debian/Ubuntu), then make venv again" >&2
    exit 1
  fi
fi
rm -rf "$venv"
"$py" -m venv "$venv"
# pip's own output (hundreds of lines) goes to a log on disk; the screen gets one
# progress line (updated in place on a terminal) and the result.
mkdir -p .cache
log=$PWD/.cache/make-venv-pip.log
echo "make venv: installing tests/requirements.txt into $venv with Python $ver (a minute or two; pip's log: ${log#"$PWD"/})"
{ "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install --progress-bar off -r tests/requirements.txt; } >"$log" 2>&1 &
pip_pid=$!
if [ -t 1 ]; then
  while kill -0 "$pip_pid" 2>/dev/null; do
    printf '\r\033[Kmake venv: pip: %d packages collected, %d s' "$(grep -c '^Collecting' "$log" || true)" "$SECONDS"
    sleep 1
  done
  printf '\r\033[K'
fi
rc=0; wait "$pip_pid" || rc=$?
if [ "$rc" -ne 0 ] || ! "$venv/bin/python" -c 'import ansible, molecule, pytest' 2>/dev/null; then
  echo "make venv: the install failed (pip rc $rc); the end of ${log#"$PWD"/}:" >&2
  tail -n 25 "$log" >&2
  exit 1
fi
n=$(grep -m1 '^Successfully installed' "$log" | wc -w || true)
echo "make venv: $(( n > 2 ? n - 2 : 0 )) packages installed in ${SECONDS} s (pip's log: ${log#"$PWD"/})"
touch "$venv/.stamp"
