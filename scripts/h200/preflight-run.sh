#!/usr/bin/env bash
# Run the GPU preflight (playbooks/preflight.yml) on a real GPU machine that has no
# network: python3 3.12 with nvidia-ml-py, nvidia-smi, nvcc. Saves under $OUT:
#   preflight-run.log     ansible-playbook output (the role, connection local)
#   preflight-check.log   the same in check mode (must report changed=0)
#   gpu_info-nvml.json    ansible_facts.llmops_gpu through NVML (backend auto)
#   gpu_info-smi.json     ansible_facts.llmops_gpu through nvidia-smi (backend nvidia-smi)
#   query-gpu.csv         the real `--query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`
#   timing.txt            wall seconds of each step + versions
#   gpu_info-*.log        the two fact runs' output
#
# Wheels it installs (carried in .whl/, not on that machine; jinja2, markupsafe,
# pyyaml and packaging are already there). Download them once, in the repo root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
#     ansible-core==2.19.14 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
# (gives ansible_core-2.19.14-py3-none-any.whl, resolvelib-1.2.1-py3-none-any.whl,
#  cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl,
#  cffi-2.1.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl, pycparser-3.12-py3-none-any.whl; ~7.5 MB)
# Device call: run(command="bash scripts/h200/preflight-run.sh", carry=[".whl"])
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1

t0=$(date +%s.%N)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
t1=$(date +%s.%N)

# Stage the repo as the llmops.serving collection (what `make stage` does).
COLL=/tmp/llmops-collections
mkdir -p $COLL/ansible_collections/llmops
ln -sfn "$ROOT" $COLL/ansible_collections/llmops/serving
export ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$COLL ANSIBLE_ROLES_PATH=$ROOT/roles
ANSIBLE_PYTHON_INTERPRETER=$(command -v python3)
export ANSIBLE_PYTHON_INTERPRETER ANSIBLE_NOCOLOR=1
PLAYBOOK=(python3 /tmp/site/bin/ansible-playbook -i "localhost," -c local playbooks/preflight.yml
          -e '{"gpu_preflight_require_nvcc": true, "gpu_preflight_expect_mig": false, "gpu_preflight_model_params_b": 8}')

python3 /tmp/site/bin/ansible-playbook --version > "$OUT/timing.txt" 2>&1
echo "wheel install: $(python3 -c "print(round($t1 - $t0, 2))") s" >> "$OUT/timing.txt"

step() {  # step NAME LOG CMD...
  local name=$1 log=$2; shift 2
  local s e rc
  s=$(date +%s.%N)
  "$@" > "$log" 2>&1; rc=$?
  e=$(date +%s.%N)
  echo "$name: rc=$rc $(python3 -c "print(round($e - $s, 2))") s" | tee -a "$OUT/timing.txt"
}

step "preflight run" "$OUT/preflight-run.log" "${PLAYBOOK[@]}"
step "preflight check mode" "$OUT/preflight-check.log" "${PLAYBOOK[@]}" --check
for backend in auto nvidia-smi; do
  f=$OUT/gpu_info-$([ $backend = auto ] && echo nvml || echo smi).json
  step "gpu_info backend=$backend" "$OUT/gpu_info-$backend.log" \
    python3 /tmp/site/bin/ansible-playbook -i localhost, -c local scripts/h200/gpu-facts.yml \
    -e gpu_facts_backend=$backend -e gpu_facts_dest="$f"
done
FIELDS=$(python3 -c "import sys; sys.path.insert(0, '$COLL'); from ansible_collections.llmops.serving.plugins.module_utils.gpu.smi import QUERY_FIELDS; print(','.join(QUERY_FIELDS))")
nvidia-smi --query-gpu="$FIELDS" --format=csv,noheader,nounits > "$OUT/query-gpu.csv" 2>&1
grep -E "PLAY RECAP|localhost +:" "$OUT/preflight-run.log" "$OUT/preflight-check.log"
grep -A3 "Summarise the host" "$OUT/preflight-run.log" | tail -3
cat "$OUT/timing.txt"
