#!/usr/bin/env bash
# The controller side on a second Python: Debian trixie's python3 (3.13) in
# llmops/debian-python:trixie (Debian packages only), a venv from
# tests/requirements.txt (cached in .cache/venv-<suite>, at the same path in
# the container), then the unit tests and a syntax check of site.yml and every
# playbook. The repository is mounted read-write at its own path.
# usage: python-matrix.sh [SUITE]   (default trixie)
set -euo pipefail
cd "$(dirname "$0")/.."
suite=${1:-trixie}
image=${LLMOPS_PYTHON_IMAGE:-llmops/debian-python:$suite}
scripts/testbed/build-python-image.sh "$suite"
# promtool for the monitoring tests, from this host's Debian package (trixie's has none).
scripts/fetch-promtool.sh >/dev/null
mounts=(-v "$PWD:$PWD")
# This machine's pip configuration (index mirrors, CA bundle, local wheels), when it has one.
for p in /etc/pip.conf /etc/xdg/pip "$HOME/.config/pip" /opt/pypi /opt/pypi-more /opt/wheels /etc/ssl/certs/ca-certificates.crt; do
  [ -e "$p" ] && mounts+=(-v "$p:$p:ro")
done
envs=()
for v in PIP_CERT PIP_FIND_LINKS PIP_DEFAULT_TIMEOUT PIP_INDEX_URL PIP_EXTRA_INDEX_URL HTTPS_PROXY HTTP_PROXY NO_PROXY https_proxy http_proxy no_proxy; do
  [ -n "${!v:-}" ] && envs+=(-e "$v=${!v}")
done
docker run --rm --network host "${mounts[@]}" "${envs[@]}" -e HOME=/tmp -e VENV=".cache/venv-$suite" \
  -w "$PWD" "$image" bash -euo pipefail -c '
  py=$(python3 -c "import sys; print(\"%d.%d\" % sys.version_info[:2])")
  echo "python-matrix: Python $py"
  want=$(sha256sum tests/requirements.txt | cut -c1-16)
  if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -r tests/requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
    "$VENV/bin/ansible-playbook" --version >/dev/null
    echo "$want" > "$VENV/.stamp"
  fi
  export PATH=$PWD/$VENV/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_HOME=$PWD/.cache/ansible-home-$py
  export ANSIBLE_COLLECTIONS_PATH=$PWD/.cache/collections:$(python -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])")
  # One ansible-playbook for all of them (one start-up, not eleven); on a failure, each alone to name it.
  if ! ansible-playbook -i inventories/local --syntax-check site.yml playbooks/*.yml >/dev/null 2>&1; then
    for p in site.yml playbooks/*.yml; do
      ansible-playbook -i inventories/local --syntax-check "$p" >/dev/null || { echo "python-matrix: syntax check of $p failed on $py" >&2; exit 1; }
    done
  fi
  echo "python-matrix: site.yml and playbooks/*.yml pass --syntax-check on $py"
  pytest -q -p no:cacheprovider tests/unit
'
