#!/usr/bin/env bash
# Stage CUDA vLLM 0.25.1 on the lent H200 machine (no network there), part by part.
# docs/h200.md is the procedure; in short:
#
#   here:  scripts/h200/stage.sh download [CHECKOUT]   # PyPI -> .cache/h200/dl, re-runnable
#          scripts/h200/stage.sh pack     [CHECKOUT]   # -> CHECKOUT/.h200/p1..p4 + SHA256SUMS
#   there: bash .h200/bin/stage.sh receive N          # one run per part, back to back
#          bash .h200/bin/stage.sh install            # rejoin, sha256 check, install into /tmp/site
#
# CHECKOUT is the checkout the device tool sends (default: this repo); the carry
# folders live in its git-ignored .h200/ (the script adds /.h200/ to
# .git/info/exclude). No torch travels: the H200 image has torch 2.11.0+cu130,
# the version vLLM 0.25.1 pins. Start the server with VLLM_USE_FLASHINFER_SAMPLER=0
# (flashinfer does not travel).
set -euo pipefail

VLLM_VERSION=0.25.1
PART_MIB=${PART_MIB:-55}           # <= 60 MiB a part; one part + the checkout (~4 MiB) < 64 MiB a call
STAGE=${STAGE:-/tmp/stage}
SITE=${SITE:-/tmp/site}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DL=${H200_DL:-$REPO/.cache/h200/dl}

# Runtime deps of vllm 0.25.1 that the H200 image lacks (found by importing the
# server there; /work/shared/h200-vllm/wheels-deps.txt). Everything else
# (torch, transformers, tokenizers, numpy, aiohttp, ...) is in the image.
DEPS=(
  annotated_types==0.8.0 apache_tvm_ffi==0.1.15.post2 astor==0.8.1 blake3==1.0.11
  cachetools==8.0.2 cbor2==6.3.0 compressed_tensors==0.17.0 depyf==0.20.0 dill==0.4.1
  diskcache==5.6.3 fastapi==0.136.3 httpcore2==2.16.2 httptools==0.9.0 httpx2==2.16.2
  ijson==3.6.0 jiter==0.19.0 jmespath==1.1.0 lark==1.2.2 llguidance==1.7.6 loguru==0.7.3
  model_hosting_container_standards==0.1.16 msgspec==0.23.0 openai==3.57.0
  openai_harmony==0.0.8 partial_json_parser==0.2.1.1.post7
  prometheus_fastapi_instrumentator==8.1.0 pybase64==1.5.1 pydantic==2.14.4
  pydantic_core==2.50.5 python_json_logger==4.2.0 python_multipart==0.0.34 pyzmq==27.3.0
  setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 supervisor==4.3.0
  truststore==0.10.5 typing_inspection==0.4.5 uvicorn==0.54.0 watchfiles==1.3.0
  websockets==17.4 xgrammar==0.2.9
)
# ansible-core for the collection's modules there (jinja2, PyYAML, MarkupSafe and
# packaging are in the image).
ANSIBLE=(ansible-core==2.19.14 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12)

die() { echo "stage.sh: $*" >&2; exit "${2:-1}"; }

pip_download() {  # pip_download DEST SPEC...
  local dest=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
    --platform any -d "$dest" "$@"
}

have_wheel() {  # have_wheel DIR SPEC: a wheel of that name and version is already there
  local name=${2%%==*} ver=${2##*==}
  name=${name//-/_}
  compgen -G "$1/${name}-${ver}-*.whl" >/dev/null || compgen -G "$1/${name,,}-${ver}-*.whl" >/dev/null
}

cmd_download() {
  mkdir -p "$DL/vllm" "$DL/deps" "$DL/ansible"
  local spec missing
  for group in vllm deps ansible; do
    missing=()
    case $group in
      vllm) specs=("vllm==$VLLM_VERSION") ;;
      deps) specs=("${DEPS[@]}") ;;
      ansible) specs=("${ANSIBLE[@]}") ;;
    esac
    for spec in "${specs[@]}"; do have_wheel "$DL/$group" "$spec" || missing+=("$spec"); done
    if [ ${#missing[@]} -eq 0 ]; then echo "$group: all ${#specs[@]} wheels already downloaded"; continue; fi
    echo "$group: downloading ${#missing[@]} of ${#specs[@]}: ${missing[*]}"
    pip_download "$DL/$group" "${missing[@]}" || die "pip download failed for $group (PyPI reachable? versions still published?)"
  done
  du -sh "$DL"/*
}

cmd_pack() {
  local out=$1/.h200
  compgen -G "$DL/vllm/vllm-$VLLM_VERSION-*.whl" >/dev/null || die "no vLLM wheel in $DL/vllm: run '$0 download' first"
  grep -qx '/.h200/' "$1/.git/info/exclude" 2>/dev/null || {
    mkdir -p "$1/.git/info"; echo '/.h200/' >> "$1/.git/info/exclude"; }
  (cd "$1" && git check-ignore -q .h200/x) || die "$1/.h200 is not git-ignored: it would travel in every call"
  mkdir -p "$out/build"
  local tarball=$out/build/vllm.tar.xz whl
  whl=$(ls "$DL"/vllm/vllm-"$VLLM_VERSION"-*.whl)
  if [ ! -s "$tarball" ] || [ "$tarball" -ot "$whl" ]; then
    echo "re-packing $(basename "$whl") as tar.xz (the wheel is zip-deflated; xz -9 is ~30% smaller)"
    rm -rf "$out/build/unz" && mkdir -p "$out/build/unz"
    (cd "$out/build/unz" && python3 -m zipfile -e "$whl" .)
    tar -C "$out/build/unz" -cf - . | xz -9 -T0 > "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
    rm -rf "$out/build/unz"
  fi
  rm -rf "$out"/p[0-9]*
  split -b "${PART_MIB}M" -d -a 2 "$tarball" "$out/build/vllm.tar.xz.part"
  local n=0 p
  for p in "$out"/build/vllm.tar.xz.part*; do
    n=$((n + 1)); mkdir -p "$out/p$n"; mv "$p" "$out/p$n/"
  done
  n=$((n + 1)); mkdir -p "$out/p$n/deps" "$out/p$n/ansible"
  cp "$DL"/deps/*.whl "$out/p$n/deps/"; cp "$DL"/ansible/*.whl "$out/p$n/ansible/"
  (cd "$out" && {
    sha256sum build/vllm.tar.xz | sed 's| build/| |'
    sha256sum p*/vllm.tar.xz.part* p*/deps/*.whl p*/ansible/*.whl
  } > SHA256SUMS)
  echo "$n" > "$out/NPARTS"
  for p in "$out"/p[0-9]*; do cp "$out/SHA256SUMS" "$out/NPARTS" "$p/"; done
  mkdir -p "$out/bin" && cp "$HERE"/stage.sh "$HERE"/gpu-run.sh "$HERE"/gpu_run.py "$out/bin/"
  du -sh "$out"/p[0-9]* "$out/bin"
  echo "carry one part a call, back to back: .h200/p1 ... .h200/p$n (with .h200/bin)"
}

cmd_check_device() {  # there: is this the H200 machine?
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is not the H200 machine (no GPU lent?)" 3
  local name; name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1) || true
  case $name in *H200*|*H100*) echo "GPU: $name" ;; *) die "no H200 here (nvidia-smi says: $name)" 3 ;; esac
}

cmd_receive() {  # there: copy carried part N into $STAGE
  local n=${1:?receive N}
  cmd_check_device
  [ -d ".h200/p$n" ] || die ".h200/p$n was not carried (run(carry=[\".h200/p$n\", \".h200/bin\"]))"
  mkdir -p "$STAGE"
  cp -a ".h200/p$n" "$STAGE/"
  (cd "$STAGE" && grep " p$n/" "p$n/SHA256SUMS" | sha256sum -c --quiet) || die "part $n: sha256 mismatch" 4
  cp "$STAGE/p$n/SHA256SUMS" "$STAGE/p$n/NPARTS" "$STAGE/"
  local total have=""
  total=$(cat "$STAGE/NPARTS")
  for i in $(seq 1 "$total"); do [ -d "$STAGE/p$i" ] && have="$have $i"; done
  echo "part $n of $total verified; parts here:$have (machine up $(cut -d' ' -f1 /proc/uptime) s)"
}

cmd_install() {  # there: rejoin, verify, install into $SITE
  cmd_check_device
  if [ -e "$SITE/.installed" ]; then echo "already installed in $SITE"; return 0; fi
  [ -s "$STAGE/NPARTS" ] || die "nothing staged in $STAGE: carry .h200/p1 first" 5
  local total i miss=""
  total=$(cat "$STAGE/NPARTS")
  for i in $(seq 1 "$total"); do [ -d "$STAGE/p$i" ] || miss="$miss $i"; done
  [ -z "$miss" ] || die "parts missing:$miss (the machine was given back in between? start again at part 1)" 5
  (cd "$STAGE" && grep -v ' vllm.tar.xz$' SHA256SUMS | sha256sum -c --quiet) || die "sha256 mismatch in $STAGE" 4
  cat "$STAGE"/p*/vllm.tar.xz.part* > "$STAGE/vllm.tar.xz"
  (cd "$STAGE" && grep ' vllm.tar.xz$' SHA256SUMS | sha256sum -c) || die "rejoined vllm.tar.xz: sha256 mismatch" 4
  mkdir -p "$SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    "$STAGE"/p*/deps/*.whl "$STAGE"/p*/ansible/*.whl
  tar -xJf "$STAGE/vllm.tar.xz" -C "$SITE"
  PYTHONPATH=$SITE python3 -c 'import vllm, ansible; print("vllm", vllm.__version__, "ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "")' \
    || die "import check failed" 6
  date -u +%FT%TZ > "$SITE/.installed"
  echo "installed into $SITE ($(du -sh "$SITE" | cut -f1)); export PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0"
}

case ${1:-} in
  download) cmd_download ;;
  pack) cmd_pack "$(cd "${2:-$REPO}" && pwd)" ;;
  all) cmd_download; cmd_pack "$(cd "${2:-$REPO}" && pwd)" ;;
  check-device) cmd_check_device ;;
  receive) cmd_receive "${2:-}" ;;
  install) cmd_install ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
