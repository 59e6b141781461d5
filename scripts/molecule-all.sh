#!/usr/bin/env bash
# Run every molecule scenario (or the ones named), each `molecule test`, and
# print a summary with wall times. Scenarios share the vLLM node image built by
# scripts/testbed/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="$PWD/.venv/bin:$PATH"
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
# Scenarios named in LLMOPS_MOLECULE_LONG (space-separated; default "ray") are
# left out of the default run, to shorten a local run:
#   LLMOPS_MOLECULE_LONG=drift scripts/molecule-all.sh   (drift: 4 nodes, ~12.5 min on 2 cores)
# `ray` (issue 18: TP=2 across two nodes in native mode, the Ray cluster, the
# worker's death and recovery) is green (873 s at load 9-13) but out of the
# default run: CI's 60 min have no room for it yet. Run it with
# scripts/molecule-all.sh ray.
long=" ${LLMOPS_MOLECULE_LONG-ray} "
if [ $# -gt 0 ]; then scenarios=("$@"); else
  mapfile -t scenarios < <(printf '%s\n' molecule/*/molecule.yml | xargs -n1 dirname | xargs -n1 basename | sort \
    | while read -r s; do case "$long" in *" $s "*) ;; *) echo "$s";; esac; done)
fi
fail=0; summary=()
for s in "${scenarios[@]}"; do
  t0=$(date +%s)
  echo "=== molecule test -s $s"
  if molecule test -s "$s"; then r=passed; else r=failed; fail=1; fi
  summary+=("$s: $r in $(( $(date +%s) - t0 )) s")
done
printf 'molecule: %s\n' "${summary[@]}"
exit $fail
