#!/usr/bin/env bash
# ansible-test sanity on the built tarball, unpacked at
# build/sanity/ansible_collections/llmops/serving (ansible-test needs that path
# layout): what ships is what is checked (symlinks stay symlinks, build_ignore
# applies). SANITY_VENV names the venv whose ansible-core (ansible-test,
# ansible-galaxy) and Python run it: the tools venv by default; the core matrix
# (scripts/core-matrix.sh) passes one per ansible-core version, each with its
# own tests/sanity/ignore-X.Y.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SANITY_VENV:-.venv}
case $venv in /*) ;; *) venv=$PWD/$venv;; esac
export PATH="$venv/bin:$PATH"
# ansible-test skips its shellcheck test silently when the tool is missing.
command -v shellcheck >/dev/null || {
  echo "sanity: shellcheck not found: apt-get install shellcheck (.ci/run does); ansible-test would skip the shellcheck test" >&2
  exit 1; }
# ansible-test bootstraps pip in its venvs with a script from its CI host,
# which is unreachable here: provide a stand-in for every pinned version.
pip_versions=$(SANITY_VENV_DIR=$venv python3 - <<'PY'
import glob, os, re
found = set()
for path in glob.glob(os.environ['SANITY_VENV_DIR'] + '/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py'):
    found.update(re.findall(r"\bpip(?:_version)?\s*=\s*['\"]([0-9.]+)['\"]", open(path).read()))
print(" ".join(sorted(found)))
PY
)
for v in ${pip_versions:-24.2}; do
  cache=~/.ansible/test/cache/get_pip_${v//./_}.py
  [ -f "$cache" ] || { mkdir -p "$(dirname "$cache")"; cp scripts/ansible_test_get_pip.py "$cache"; }
done
# One tree per venv: the core matrix runs in the background while the sanity stage
# runs (a shared tree was rebuilt under the other's pylint: "os.getcwd() failed").
root=build/sanity
[ -n "${SANITY_VENV:-}" ] && root=build/sanity-$(basename "$venv")
stage=$root/ansible_collections/llmops/serving
rm -rf "$root"
mkdir -p "$stage" "$root/tarball"
ansible-galaxy collection build --force --output-path "$root/tarball" >/dev/null
tar -xzf "$root"/tarball/llmops-serving-*.tar.gz -C "$stage"
cd "$stage"
git init -q && git add -A >/dev/null 2>&1
python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ansible-test sanity --python "$python" --color no "$@"
