#!/usr/bin/env bash
# CI stage `ecosystem` (background lane): the built tarball as the ecosystem's
# tools take it, offline, no registry, no container:
#   1. galaxy-importer (Galaxy's own import checks: metadata, role READMEs,
#      docs through ansible-doc, changelog, flake8 on) must end with
#      "Importer processing completed successfully" and log no ERROR;
#   2. antsibull-docs lint-collection-docs --plugin-docs (the docs site's checks);
#   3. ansible-builder: `create` makes the build context of ee/execution-environment.yml
#      and `introspect` of the installed tarball yields requirements.txt and
#      bindep.txt (what meta/execution-environment.yml declares).
# galaxy-importer's own ansible-lint pass is off here: the ansible-lint stage
# runs the same ansible-lint (26.10.1, production profile) on the tree, and a
# second whole-collection lint costs about 150 s of a core (it also hits the
# importer's 180 s timeout on a loaded 2-core machine). Run it by hand with
# LLMOPS_IMPORTER_LINT=1 (docs/releasing.md).
# The tools live in a venv cached under .cache/ecosystem-venv (pinned below).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/ecosystem-venv
pins="galaxy-importer==0.4.44 antsibull-docs==2.28.0 ansible-builder==3.2.0 flake8==6.1.0"
if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086 # the pins, split on spaces
  "$venv/bin/pip" install -q $pins 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -c "import galaxy_importer, antsibull_docs, ansible_builder" || {
    echo "ecosystem: the tools did not install into $venv" >&2; exit 1; }
  echo "$pins" > "$venv/.stamp"
fi
work=build/ecosystem
rm -rf "$work" && mkdir -p "$work"
# The collections galaxy.yml depends on, as an EE would have them: from the tools venv's `ansible` package.
deps=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections
: >"$work/ansible.cfg"
export PATH="$PWD/$venv/bin:$PATH" ANSIBLE_HOME="$PWD/$work/ansible-home" ANSIBLE_CONFIG="$PWD/$work/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH="$PWD/$work/collections"
mkdir -p "$work/collections/ansible_collections/community" "$work/collections/ansible_collections/ansible"
cp -r "$deps/community/docker" "$deps/community/library_inventory_filtering_v1" "$work/collections/ansible_collections/community/"
cp -r "$deps/ansible/posix" "$work/collections/ansible_collections/ansible/"
ansible-galaxy collection build --force --output-path "$work" >/dev/null
tarball=$(echo "$work"/llmops-serving-*.tar.gz)
fail=0
t0=$(date +%s)
# (in $work: the importer writes importer_result.json into its working directory)
(cd "$work" && GALAXY_IMPORTER_RUN_FLAKE8=true \
  GALAXY_IMPORTER_RUN_ANSIBLE_LINT=$([ -n "${LLMOPS_IMPORTER_LINT:-}" ] && echo true || echo false) \
  python -m galaxy_importer.main "$PWD/$(basename "$tarball")" >galaxy-importer.log 2>&1) || true
if ! grep -q "^Importer processing completed successfully" "$work/galaxy-importer.log" || grep -q "^ERROR" "$work/galaxy-importer.log"; then
  echo "ecosystem: galaxy-importer refuses $tarball:" >&2
  grep -E "^(ERROR|WARNING)" "$work/galaxy-importer.log" | head -40 >&2
  fail=1
else
  echo "ecosystem: galaxy-importer 0.4.44 imports $(basename "$tarball") ($(( $(date +%s) - t0 )) s;" \
    "$(grep -c '^WARNING' "$work/galaxy-importer.log") warnings, see $work/galaxy-importer.log)"
fi
t0=$(date +%s)
mkdir -p "$work/collections/ansible_collections/llmops"
mkdir -p "$work/collections/ansible_collections/llmops/serving"
tar -xzf "$tarball" -C "$work/collections/ansible_collections/llmops/serving"
if (cd "$work/collections/ansible_collections/llmops/serving" && antsibull-docs lint-collection-docs --plugin-docs .) >"$work/antsibull-docs.log" 2>&1; then
  echo "ecosystem: antsibull-docs lint-collection-docs --plugin-docs: clean ($(( $(date +%s) - t0 )) s)"
else
  echo "ecosystem: antsibull-docs lint-collection-docs --plugin-docs fails:" >&2; tail -n 30 "$work/antsibull-docs.log" >&2; fail=1
fi
t0=$(date +%s)
if ansible-builder create -f ee/execution-environment.yml -c "$work/ee-context" >"$work/ansible-builder.log" 2>&1 \
   && { [ -f "$work/ee-context/Containerfile" ] || [ -f "$work/ee-context/Dockerfile" ]; } \
   && [ -f "$work/ee-context/_build/requirements.yml" ]; then
  ansible-builder introspect "$work/collections" >"$work/introspect.txt" 2>&1 || true
  missing=$(python3 - "$work/introspect.txt" <<'PY'
import sys
text = open(sys.argv[1]).read()
want = [l.split("#")[0].strip() for f in ("requirements.txt", "bindep.txt") for l in open(f) if l.split("#")[0].strip()]
print(" ".join(repr(w) for w in want if w not in text))
PY
)
  if [ -n "$missing" ]; then
    echo "ecosystem: ansible-builder introspect does not see $missing (meta/execution-environment.yml)" >&2; fail=1
  else
    echo "ecosystem: ansible-builder create makes the EE build context; introspect reads requirements.txt" \
      "and bindep.txt from the installed tarball ($(( $(date +%s) - t0 )) s)"
  fi
else
  echo "ecosystem: ansible-builder create failed:" >&2; tail -n 20 "$work/ansible-builder.log" >&2; fail=1
fi
exit $fail
