#!/usr/bin/env bash
# Run every molecule scenario (or the ones named), each `molecule test`, and
# print a summary with wall times. Scenarios share the vLLM node image built by
# scripts/testbed/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="$PWD/.venv/bin:$PATH"
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
# Scenarios named in LLMOPS_MOLECULE_LONG (space-separated; default none) are
# left out of the default run, to shorten a local run:
#   LLMOPS_MOLECULE_LONG="drift ray" scripts/molecule-all.sh   (drift: 4 nodes, ~20 min; ray: 2 nodes, ~5-10 min)
long=" ${LLMOPS_MOLECULE_LONG-} "
# --queue FILE: take scenarios one at a time from FILE (one name per line,
# shared with other lanes; flock), until it is empty. scripts/test.sh gives
# both of its lanes the same queue, so they balance on any machine.
queue=""
if [ "${1:-}" = "--queue" ]; then queue=${2:?usage: molecule-all.sh --queue FILE}; shift 2; fi
pop() {
  # shellcheck disable=SC2016 # the inner script's own variables
  flock "$queue.lock" bash -c 'f=$1; s=$(head -n 1 "$f"); [ -n "$s" ] || exit 1; sed -i 1d "$f"; echo "$s"' _ "$queue"
}
list=""
if [ "${1:-}" = "--list" ]; then list=1; shift; fi
if [ -n "$queue" ]; then scenarios=("$@")
elif [ $# -gt 0 ] && [ -z "$list" ]; then scenarios=("$@"); else
  mapfile -t scenarios < <(printf '%s\n' molecule/*/molecule.yml | xargs -n1 dirname | xargs -n1 basename | sort \
    | while read -r s; do case "$long" in *" $s "*) ;; *) echo "$s";; esac; done)
fi
# --list: print the default scenarios (all but LLMOPS_MOLECULE_LONG), one per line.
if [ -n "$list" ]; then printf '%s\n' "${scenarios[@]}"; exit 0; fi
fail=0; summary=()
run_one() {
  local s=$1 t0 r
  t0=$(date +%s)
  echo "=== molecule test -s $s"
  # Each scenario's output also goes to reports/test/molecule/NAME.log; a
  # failed one adds why (scripts/failure-digest.py) to reports/test/failures.txt,
  # which scripts/test.sh prints last.
  local log=reports/test/molecule/$s.log pid rc=0
  mkdir -p reports/test/molecule
  # Into its log, followed on stdout (as scripts/test.sh's stages).
  molecule test -s "$s" > "$log" 2>&1 < /dev/null &
  pid=$!
  tail -n +1 -f --pid="$pid" "$log"
  wait "$pid" || rc=$?
  if [ $rc -eq 0 ]; then r=passed; else
    r=failed; fail=1
    python3 scripts/failure-digest.py "molecule $s" "$log" >> reports/test/failures.txt
  fi
  summary+=("$s: $r in $(( $(date +%s) - t0 )) s")
}
for s in "${scenarios[@]}"; do run_one "$s"; done
if [ -n "$queue" ]; then
  while s=$(pop); do run_one "$s"; done
fi
printf 'molecule: %s\n' "${summary[@]}"
exit $fail
