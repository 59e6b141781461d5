#!/usr/bin/env bash
# run-logged.sh LOG CMD [ARG...]: run CMD with its output in LOG, followed on
# stdout, and exit with CMD's status. Not a pipe to tee: a daemon that CMD left
# behind holding its output would keep a pipe, and the caller, open. Used by
# scripts/test.sh (each stage) and scripts/molecule-all.sh (each scenario).
set -uo pipefail
log=${1:?usage: run-logged.sh LOG CMD [ARG...]}; shift
# The log exists before tail opens it (else, on a loaded machine, tail can start
# first, find nothing and leave: the stage then runs unseen; seen in a CI run).
: > "$log"
"$@" >> "$log" 2>&1 < /dev/null &
pid=$!
tail -n +1 -f --pid="$pid" "$log"
wait "$pid"
