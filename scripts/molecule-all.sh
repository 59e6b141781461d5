#!/usr/bin/env bash
# Run every molecule scenario (or the ones named), each `molecule test`, and
# print a summary with wall times. Scenarios share the vLLM node image built by
# scripts/testbed/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="$PWD/.venv/bin:$PATH"
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
# LLMOPS_PROFILE=1: each task's start time and the slowest tasks of each run in the scenario's
# log (ansible.posix.profile_tasks). Not by default (longer logs). The drift tests' own
# ansible-playbook --json runs drop it (its lines broke their JSON in CI 2026-12-04).
[ -n "${LLMOPS_PROFILE:-}" ] && export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
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
# The state of a failed scenario's nodes, before they are destroyed: failed
# units and the journal's last lines of the collection's services, per node.
post_mortem() {
  local s=$1 node
  for node in $(python3 -c 'import sys, yaml; print(" ".join(p["name"] for p in yaml.safe_load(open(sys.argv[1]))["platforms"]))' \
      "molecule/$s/molecule.yml"); do
    echo "=== post-mortem $node: failed units"
    timeout 20 docker exec "$node" systemctl list-units --failed --plain --no-legend --no-pager 2>&1
    echo "=== post-mortem $node: journal"
    timeout 20 docker exec "$node" journalctl --no-pager -n 60 -o short-precise \
      -u 'vllm*' -u 'ray*' -u 'gpustack*' -u 'haproxy*' -u 'prometheus*' -u 'llmops*' 2>&1
  done
}
run_one() {
  local s=$1 t0 r
  t0=$(date +%s)
  echo "=== molecule test -s $s"
  # Each scenario's output also goes to reports/test/molecule/NAME.log. Its
  # nodes outlive the sequence (--destroy never) so that a failed one's state
  # joins the log (post_mortem) before `molecule destroy`; why it failed
  # (scripts/failure-digest.py) goes to reports/test/failures.txt, which
  # scripts/test.sh prints last.
  local log=reports/test/molecule/$s.log rc=0
  mkdir -p reports/test/molecule
  scripts/run-logged.sh "$log" molecule test -s "$s" --destroy never || rc=$?
  if [ $rc -ne 0 ]; then post_mortem "$s" >> "$log" 2>&1; fi
  echo "=== molecule destroy -s $s" >> "$log"
  if ! molecule destroy -s "$s" < /dev/null >> "$log" 2>&1; then
    echo "molecule destroy -s $s failed (reports/test/molecule/$s.log)"; [ $rc -ne 0 ] || rc=1
  fi
  if [ $rc -eq 0 ]; then r=passed; else
    r=failed; fail=1
    python3 scripts/failure-digest.py "molecule $s" "$log" >> reports/test/failures.txt
  fi
  summary+=("$s: $r in $(( $(date +%s) - t0 )) s")
  # Its window, for scripts/test.sh's CPU summary per stage (scripts/cpu-sampler.py).
  printf 'molecule/%s\t%s\t%s\n' "$s" "$t0" "$(date +%s)" >> reports/test/stage-windows.tsv
}
for s in "${scenarios[@]}"; do run_one "$s"; done
if [ -n "$queue" ]; then
  while s=$(pop); do run_one "$s"; done
fi
printf 'molecule: %s\n' "${summary[@]}"
exit $fail
