#!/usr/bin/env bash
# Install the built collection the way a user does, with nothing else around:
# a clean venv with ansible-core only, the tarball from build/, and exactly the
# dependencies galaxy.yml declares (from the `ansible` package's bundled
# collections, packed as local tarballs: Galaxy is unreachable; --offline).
# Then syntax-check site.yml, every collection playbook and one playbook per
# role, all by FQCN, from a directory with no ansible.cfg. An undeclared
# collection shows up as "couldn't resolve module/action"; a declared one that
# is missing makes the install fail.
# usage: install-test.sh [--without NS.NAME]   (drop one dependency: must fail)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
without=""
[ "${1:-}" = "--without" ] && without=$2
core=$(awk -F'==' '/^ansible-core==/{print $2}' tests/requirements.txt)
bundled=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections
work=$repo/build/install-test
venv=$repo/.cache/core-only-venv-$core
# The clean venv is cached per ansible-core version (pip is the slow part).
if [ ! -f "$venv/.stamp" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "ansible-core==$core" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/ansible" --version >/dev/null
  touch "$venv/.stamp"
fi
"$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("ansible_collections") is not None)' || {
  echo "install-test: $venv has collections besides ansible-core" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work/tarballs" "$work/play"
version=$(awk '/^version:/{print $2}' galaxy.yml)
tarball=build/llmops-serving-$version.tar.gz
[ -f "$tarball" ] || tarball=""
[ -n "$tarball" ] || { echo "install-test: no build/llmops-serving-*.tar.gz (make build)" >&2; exit 1; }
# The dependencies the tarball declares (its MANIFEST.json, not galaxy.yml)
# and theirs, each packed from the `ansible` package's copy: an installed
# collection (MANIFEST.json + FILES.json + files) is an artifact.
mapfile -t args < <("$venv/bin/python" - "$tarball" "$bundled" "$work/tarballs" "$without" <<'PY'
import hashlib, io, json, os, sys, tarfile
tarball, bundled, out, without = sys.argv[1:5]
with tarfile.open(tarball) as t:
    todo = list(json.load(t.extractfile("MANIFEST.json"))["collection_info"].get("dependencies") or {})
print(os.path.abspath(tarball))
print("declared: " + " ".join(sorted(todo)), file=sys.stderr)
seen = set()
while todo:
    fqcn = todo.pop()
    if fqcn in seen:
        continue
    seen.add(fqcn)
    if fqcn == without:
        print("install-test: leaving out %s (as asked)" % fqcn, file=sys.stderr)
        continue
    src = os.path.join(bundled, *fqcn.split("."))
    try:
        info = json.load(open(os.path.join(src, "MANIFEST.json")))["collection_info"]
    except OSError:
        sys.exit("install-test: %s is not in the ansible package (%s)" % (fqcn, src))
    todo += list(info.get("dependencies") or {})
    dest = os.path.join(out, "%s-%s-%s.tar.gz" % (info["namespace"], info["name"], info["version"]))
    # The ansible package drops some files its FILES.json lists (CI configs):
    # list only what is there, and re-sum FILES.json in MANIFEST.json.
    files = json.load(open(os.path.join(src, "FILES.json")))
    files["files"] = [f for f in files["files"] if f["name"] == "."
                      or os.path.lexists(os.path.join(src, f["name"]))]
    files_blob = json.dumps(files, indent=4).encode()
    manifest = json.load(open(os.path.join(src, "MANIFEST.json")))
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_blob).hexdigest()
    manifest_blob = json.dumps(manifest, indent=4).encode()
    with tarfile.open(dest, "w:gz") as t:
        for name, blob in (("MANIFEST.json", manifest_blob), ("FILES.json", files_blob)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(blob), 0o644
            t.addfile(ti, io.BytesIO(blob))
        for f in files["files"]:
            if f["name"] != ".":
                t.add(os.path.join(src, f["name"]), arcname=f["name"], recursive=False)
    print(dest)
PY
)
[ ${#args[@]} -gt 0 ] || exit 1
deps=$(cd "$work/tarballs" && echo *)
: >"$work/play/ansible.cfg"
export ANSIBLE_CONFIG=$work/play/ansible.cfg ANSIBLE_HOME=$work/home ANSIBLE_COLLECTIONS_PATH=$work/collections
"$venv/bin/ansible-galaxy" collection install --offline -p "$work/collections" "${args[@]}" >"$work/install.log" 2>&1 || {
  cat "$work/install.log" >&2; echo "install-test: FAILED: the tarball does not install with its declared dependencies" >&2; exit 1; }
installed=$work/collections/ansible_collections/llmops/serving
# A throwaway inventory: the syntax check needs hosts in the groups, nothing else.
printf '[vllm]\nnode ansible_connection=local\n[gpu:children]\nvllm\n' >"$work/play/hosts.ini"
plays=()
for role in "$installed"/roles/*/; do
  role=$(basename "$role")
  printf -- '---\n- name: %s by FQCN\n  hosts: all\n  roles:\n    - role: llmops.serving.%s\n' \
    "$role" "$role" >"$work/play/role-$role.yml"
  plays+=("$work/play/role-$role.yml")
done
for p in "$installed"/playbooks/*.yml; do plays+=("llmops.serving.$(basename "$p" .yml)"); done
fail=0
cd "$work/play"
for p in "$installed/site.yml" "${plays[@]}"; do
  if ! "$venv/bin/ansible-playbook" -i hosts.ini --syntax-check "$p" >"$work/check.log" 2>&1; then
    echo "install-test: FAILED: ansible-playbook --syntax-check $p" >&2
    grep -v '^\s*$' "$work/check.log" | tail -n 8 >&2
    fail=1
  fi
done
[ $fail -eq 0 ] || exit 1
echo "install-test: $(basename "$tarball") + [$deps] install into ansible-core $core alone;" \
  "site.yml and ${#plays[@]} playbooks (every role by FQCN) pass --syntax-check"
