#!/usr/bin/env bash
# Stage what the lent H200 machine (no network) needs to run the collection's own
# path - wheelhouse.yml + site.yml under systemd - part by part. docs/h200.md is
# the procedure; in short:
#
#   here:  scripts/h200/stage.sh download   # the locked wheelhouse (the wheelhouse role, run
#                                           # here as its controller), ansible-core, systemd .debs
#          scripts/h200/stage.sh pack       # -> .h200/p1..p5 + SHA256SUMS (git-ignored)
#   there: bash scripts/h200/stage.sh receive N      # one device call per part, back to back
#          bash scripts/h200/stage.sh install [--early|--pieces]
#                # ansible-core into /var/lib/llmops-h200/site (--early: only that, from p1); the vLLM wheel
#                # rejoined byte for byte into the wheelhouse's controller cache (sha256 = PyPI's);
#                # --pieces also unpacks vLLM and its lock into /var/lib/llmops-h200/site for gpu-run.sh (argv
#                # started by hand, no systemd)
#
# p1 holds all but the vLLM wheel: the lock's 42 wheels and the wheelhouse's requirements.json,
# ansible-core and its 4 dependencies, community.docker + ansible.posix, the 23 systemd .debs
# (the first call boots systemd and runs the preflight with it). The vLLM wheel (239 MiB) travels
# raw: its first P1_WHEEL_BYTES in p1, the rest in p2..p5 of <= PART_BYTES (a call carries at
# most 64 MiB with the checkout).
# No torch travels: the image has torch 2.11.0+cu130, the version vLLM 0.25.1 pins.
set -euo pipefail

VLLM_VERSION=0.25.1
# The wheel's first P1_WHEEL_BYTES ride in p1, the rest in parts of PART_BYTES: each call's
# carry (part + the checkout, ~5 MB in 2026-12) stays under 64 MiB (p1 is ~54 MB: its 42 wheels, the debs and
# ansible-core ride there; with 17.8 MB of the wheel it no longer fit, 2026-12-04).
PART_BYTES=${PART_BYTES:-60100000}
P1_WHEEL_BYTES=${P1_WHEEL_BYTES:-10000000}
STAGE=${STAGE:-/var/lib/llmops-h200/stage}
SITE=${SITE:-/var/lib/llmops-h200/site}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DL=${H200_DL:-$REPO/.cache/h200/dl}
WH_NAME=vllm-$VLLM_VERSION-cp312-x86_64
WH_HERE=$REPO/.cache/wheelhouses
# Where the inventory (scripts/h200/inventory) keeps the controller cache on the machine.
WH_THERE=${WH_THERE:-/var/cache/llmops/wheelhouses}
OUTDIR=$REPO/.h200
# The collections the runner's ansible-playbook reads (site_run.py: ANSIBLE_COLLECTIONS_PATH).
COLL=${H200_COLL:-/var/lib/llmops-h200/work/collections}

# ansible-core for the collection there (jinja2, PyYAML, MarkupSafe and packaging are in the image).
ANSIBLE=(ansible-core==2.19.14 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12)
# Tools for the figures (not the collection's): py-spy dumps the engine's stacks during a start.
TOOLS=(py-spy==0.4.3)
# Debian bookworm's systemd 252 and what it links, for the image's Ubuntu 24.04 userland
# (boot-systemd.sh copies in only files the image lacks).
DEBS=(systemd libsystemd-shared libsystemd0 libcryptsetup12 libfdisk1 libkmod2 libp11-kit0 libseccomp2
      libapparmor1 libip4tc2 libargon2-1 libdevmapper1.02.1 libjson-c5 libacl1 libaudit1 libcap2 libpam0g
      dbus dbus-bin dbus-daemon dbus-system-bus-common libdbus-1-3 libexpat1)

die() { echo "stage.sh: $*" >&2; exit "${2:-1}"; }

cmd_download() {
  mkdir -p "$DL/ansible" "$DL/debs" "$DL/tools"
  # The locked wheelhouse, built by the wheelhouse role itself with this machine as its
  # controller (pip download --no-deps of the inventory's pins for cp312 / manylinux).
  local venv=${VENV:-$REPO/.venv}
  [ -x "$venv/bin/ansible-playbook" ] || die "no $venv/bin/ansible-playbook: run 'make venv stage' first"
  (cd "$REPO" && ANSIBLE_CONFIG=$REPO/ansible.cfg \
     ANSIBLE_COLLECTIONS_PATH=$REPO/.cache/collections:$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
     "$venv/bin/ansible-playbook" -i scripts/h200/inventory playbooks/wheelhouse.yml -t wheelhouse_build \
       -e wheelhouse_controller_dir="$WH_HERE" -e wheelhouse_pip_python="$venv/bin/python")
  ls "$WH_HERE/$WH_NAME"/vllm-$VLLM_VERSION-*.whl >/dev/null || die "the wheelhouse has no vLLM wheel"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$DL/ansible" "${ANSIBLE[@]}" || die "pip download of ansible-core failed"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$DL/tools" "${TOOLS[@]}" || die "pip download of the tools failed"
  (cd "$DL/debs" && { apt-get update -qq >/dev/null 2>&1 || true; apt-get download "${DEBS[@]}" >/dev/null; }) \
    || die "apt-get download of the systemd packages failed"
  du -sh "$WH_HERE/$WH_NAME" "$DL"/ansible "$DL"/debs
}

cmd_pack() {
  local wh=$WH_HERE/$WH_NAME whl sp
  whl=$(ls "$wh"/vllm-$VLLM_VERSION-*.whl 2>/dev/null) || die "no vLLM wheel in $wh: run '$0 download' first"
  sp=$("${VENV:-$REPO/.venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  grep -qx '/.h200/' "$REPO/.git/info/exclude" 2>/dev/null || {
    mkdir -p "$REPO/.git/info"; echo '/.h200/' >> "$REPO/.git/info/exclude"; }
  (cd "$REPO" && git check-ignore -q .h200/x) || die "$OUTDIR is not git-ignored: it would travel in every call"
  rm -rf "$OUTDIR" && mkdir -p "$OUTDIR/build" "$OUTDIR/p1/wh" "$OUTDIR/p1/ansible" "$OUTDIR/p1/debs" "$OUTDIR/p1/tools"
  # p1: everything but the vLLM wheel (the first call boots systemd and runs the preflight with it).
  find "$wh" -maxdepth 1 -type f ! -name "$(basename "$whl")" -exec cp {} "$OUTDIR/p1/wh/" \;
  cp "$DL"/ansible/*.whl "$OUTDIR/p1/ansible/"; cp "$DL"/debs/*.deb "$OUTDIR/p1/debs/"; cp "$DL"/tools/*.whl "$OUTDIR/p1/tools/"
  # The collections galaxy.yml declares (site.yml names community.docker's module), from the tools venv.
  tar -C "$sp" -czf "$OUTDIR/p1/collections.tgz" ansible_collections/community/docker ansible_collections/ansible/posix
  head -c "$P1_WHEEL_BYTES" "$whl" > "$OUTDIR/p1/vllm.whl.part00"
  tail -c +$((P1_WHEEL_BYTES + 1)) "$whl" | split -b "$PART_BYTES" -a 2 --numeric-suffixes=1 - "$OUTDIR/build/vllm.whl.part"
  local n=1 p
  for p in "$OUTDIR"/build/vllm.whl.part*; do
    n=$((n + 1)); mkdir -p "$OUTDIR/p$n"; mv "$p" "$OUTDIR/p$n/"
  done
  (cd "$OUTDIR" && {
    sha256sum "$whl" | sed "s| .*/|  |"
    sha256sum p*/vllm.whl.part* p1/wh/* p1/ansible/*.whl p1/debs/*.deb p1/tools/*.whl p1/collections.tgz
  } > SHA256SUMS)
  echo "$n" > "$OUTDIR/NPARTS"
  for p in "$OUTDIR"/p[0-9]*; do cp "$OUTDIR/SHA256SUMS" "$OUTDIR/NPARTS" "$p/"; done
  rm -rf "$OUTDIR/build"
  du -sh "$OUTDIR"/p[0-9]*
  echo "carry one part a call, back to back: .h200/p1 ... .h200/p$n"
}

cmd_check_device() {  # there: is this the H200 machine?
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is not the H200 machine (no GPU lent?)" 3
  local name; name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1) || true
  case $name in *H200*|*H100*) echo "GPU: $name" ;; *) die "no H200 here (nvidia-smi says: $name)" 3 ;; esac
}

cmd_receive() {  # there: copy carried part N into $STAGE
  local n=${1:?receive N}
  cmd_check_device
  [ -d ".h200/p$n" ] || die ".h200/p$n was not carried (run(carry=[\".h200/p$n\"]))"
  mkdir -p "$STAGE"
  cp -a ".h200/p$n" "$STAGE/"
  (cd "$STAGE" && grep " p$n/" "p$n/SHA256SUMS" | sha256sum -c --quiet) || die "part $n: sha256 mismatch" 4
  cp "$STAGE/p$n/SHA256SUMS" "$STAGE/p$n/NPARTS" "$STAGE/"
  local total have=""
  total=$(cat "$STAGE/NPARTS")
  for i in $(seq 1 "$total"); do [ -d "$STAGE/p$i" ] && have="$have $i"; done
  echo "part $n of $total verified; parts here:$have (machine up $(cut -d' ' -f1 /proc/uptime) s)"
}

cmd_install() {  # there: ansible-core + collections (p1); the wheelhouse once every part is here
  cmd_check_device
  [ -d "$STAGE/p1" ] || die "part 1 is not staged in $STAGE: carry .h200/p1 first" 5
  local total i miss="" wh whl first=$STAGE/p1
  mkdir -p "$SITE" "$COLL"
  if [ ! -e "$SITE/.installed" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$first"/ansible/*.whl
    tar -C "$COLL" -xzf "$first/collections.tgz"
    if ls "$first"/tools/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE/tools" "$first"/tools/*.whl
    fi
    date -u +%FT%TZ > "$SITE/.installed"
  fi
  PYTHONPATH=$SITE python3 -c 'import ansible.release as r; print("ansible-core", r.__version__)' || die "import check failed" 6
  [ "${1:-}" = --early ] && return 0
  total=$(cat "$STAGE/NPARTS")
  for i in $(seq 1 "$total"); do [ -d "$STAGE/p$i" ] || miss="$miss $i"; done
  [ -z "$miss" ] || die "parts missing:$miss (the machine was given back in between? start again at part 1)" 5
  wh=$WH_THERE/$WH_NAME
  whl=$(awk 'NR==1 {print $2}' "$STAGE/SHA256SUMS")
  mkdir -p "$wh"
  if [ ! -s "$wh/$whl" ]; then
    cp "$first"/wh/* "$wh/"
    cat "$STAGE"/p*/vllm.whl.part* > "$wh/$whl.tmp" && mv "$wh/$whl.tmp" "$wh/$whl"
  fi
  (cd "$wh" && head -1 "$STAGE/SHA256SUMS" | sha256sum -c --quiet) || die "rejoined $whl: sha256 mismatch" 4
  if [ "${1:-}" = --pieces ] && [ ! -e "$SITE/vllm/__init__.py" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$wh"/*.whl
  fi
  echo "wheelhouse $wh: $(find "$wh" -maxdepth 1 -name '*.whl' | wc -l) wheels, $whl sha256 OK (PyPI's); ansible-core in $SITE"
}

case ${1:-} in
  download) cmd_download ;;
  pack) cmd_pack ;;
  all) cmd_download; cmd_pack ;;
  check-device) cmd_check_device ;;
  receive) cmd_receive "${2:-}" ;;
  install) cmd_install "${2:-}" ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
