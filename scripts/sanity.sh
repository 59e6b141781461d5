#!/usr/bin/env bash
# ansible-test sanity on a staged copy at ansible_collections/llmops/serving
# (ansible-test needs that path layout), using the tools venv's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
stage=build/sanity/ansible_collections/llmops/serving
rm -rf build/sanity
mkdir -p "$stage"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$stage"/ 2>/dev/null || true
cd "$stage"
git init -q && git add -A >/dev/null 2>&1
python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ansible-test sanity --python "$python" --color no "$@"
