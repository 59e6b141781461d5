#!/usr/bin/env bash
# `make test`: the whole suite, as CI runs it. Each stage is timed; all stages
# run even when one fails, and the pytest summary line closes the run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="$PWD/.venv/bin:$PATH"
# ansible-lint / ansible-galaxy caches and collection copies stay in the repo.
export ANSIBLE_HOME=${ANSIBLE_HOME:-$PWD/.cache/ansible-home}
[ -d /opt/wheels ] && export LLMOPS_WHEELS_DIR=${LLMOPS_WHEELS_DIR:-/opt/wheels}
mkdir -p reports/test
declare -a results=()
fail=0
stage() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  echo "=============== $name"
  if "$@"; then results+=("$name: ok ($(( $(date +%s) - t0 )) s)")
  else results+=("$name: FAILED ($(( $(date +%s) - t0 )) s)"); fail=1; fi
}
stage yamllint yamllint -s .
stage ansible-lint ansible-lint --profile production
stage sanity scripts/sanity.sh
# docs/modules/*.md and docs/filters.md are what the plugins' documentation renders to.
stage docs python scripts/gen-plugin-docs.py --check
stage build bash -c 'ansible-galaxy collection build --force --output-path build/ >/dev/null && ansible-galaxy collection install --force -p build/installed build/llmops-serving-*.tar.gz >/dev/null && ANSIBLE_COLLECTIONS_PATH=build/installed ansible-doc llmops.serving.vllm_health >/dev/null && echo "collection tarball builds, installs and documents"'
# The tarball with only its declared dependencies, in a venv with ansible-core alone.
stage install-test scripts/install-test.sh
stage testbed scripts/testbed/setup.sh
# The controller side on a second Python (Debian trixie's 3.13).
stage python-matrix scripts/python-matrix.sh trixie
# The live suites need a vLLM python on this machine: the node image's venv,
# copied out (no second 2.5 GB install).
vllm_python=$(scripts/testbed/host-vllm-venv.sh) || vllm_python=""
if [ -z "${LLMOPS_SKIP_LIVE:-}" ]; then
  stage live-modules env VLLM_TEST_PYTHON="$vllm_python" pytest -q -p no:cacheprovider -m vllm_live \
    tests/integration/test_vllm_live.py
  # EvalScope (its own venv, cached under .cache/) against a real vLLM server:
  # molecule/vllm_service (load phase) covers vllm bench, the sweep and the bounds.
  stage live-evalscope env VLLM_TEST_PYTHON="$vllm_python" EVALSCOPE_VENV="$PWD/.cache/evalscope-venv" \
    pytest -q -p no:cacheprovider tests/integration/test_verify_live.py -k evalscope
  stage gpustack tests/integration/gpustack/run.sh
fi
# shellcheck disable=SC2086 # a space-separated list of scenario names
stage molecule scripts/molecule-all.sh ${LLMOPS_MOLECULE_SCENARIOS:-}
printf '%s\n' "${results[@]}" | tee reports/test/stages.txt
# Unit tests (+ live integration tests when a vLLM venv is given) last, so their
# summary line closes the output.
py_fail=0
# With VLLM_TEST_PYTHON the flag tests also run the installed vLLM's own parser.
# shellcheck disable=SC2086 # extra pytest arguments, split on spaces
VLLM_TEST_PYTHON="$vllm_python" pytest -q tests/unit ${LLMOPS_PYTEST_EXTRA:-} -p no:cacheprovider || py_fail=$?
[ $fail -eq 0 ] && [ $py_fail -eq 0 ]
