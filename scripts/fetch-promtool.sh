#!/usr/bin/env bash
# Print the path of a promtool for the monitoring tests: promtool from PATH,
# else the static binary of this machine's Debian package `prometheus`,
# unpacked (not installed: no service, no user) under .cache/promtool.
# Run on the host: the python-matrix stage calls it before its container
# starts, because Debian trixie's `prometheus` package ships no promtool.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v promtool >/dev/null 2>&1; then command -v promtool; exit 0; fi
cache=$PWD/.cache/promtool
bin=$cache/usr/bin/promtool
if [ ! -x "$bin" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1
    (cd "$tmp" && apt-get download prometheus >/dev/null) || { echo "fetch-promtool: apt-get download prometheus failed" >&2; exit 1; }
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
  [ -x "$tmp/x/usr/bin/promtool" ] || { echo "fetch-promtool: this distribution's prometheus package has no promtool (Debian trixie moved it); run on bookworm or put promtool on PATH" >&2; exit 1; }
  rm -rf "$cache"; mkdir -p "$cache/usr/bin"
  cp "$tmp/x/usr/bin/promtool" "$bin"
fi
echo "$bin"
