#!/usr/bin/env bash
# CI stage `live-venvs` (background, beside the lint stages): the two venvs the
# live stages install from PyPI on a clean checkout, mostly network time:
#   - GPUStack 2.3.0 for tests/integration/gpustack/run.sh (its own `venv` step);
#   - EvalScope for live-evalscope, by the verify role's own install tasks
#     (tasks_from: install; the pinned verify_evalscope_version).
# Both are no-ops when the venv is there. The live stages wait for this one.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_CONFIG=$PWD/ansible.cfg
rc=0
tests/integration/gpustack/run.sh venv || rc=1
work=$(mktemp -d /tmp/live-venvs.XXXXXX)
ansible localhost -i localhost, -c local -e "ansible_python_interpreter=$(command -v python3)" \
  -m ansible.builtin.include_role -a "name=llmops.serving.verify tasks_from=install" \
  -e verify_tool=evalscope -e "verify_evalscope_venv=${EVALSCOPE_VENV:-$PWD/.cache/evalscope-venv}" \
  -e "verify_work_dir=$work" -e verify_loadgen_host=localhost || rc=1
rm -rf "$work"
exit $rc
