#!/bin/sh
# llmops.serving: the gateway's agent-check for vLLM instances (docs/vllm_service.md, docs/gateway.md).
# Started by llmops-vllm-agent.socket once per connection (Accept=yes, stdin and stdout are the
# connection). HAProxy sends one line, the instance name (agent-send "NAME\n"); the answer is
#   up            vllm@NAME.service is active (its warmup hook, ExecStartPost, has finished)
#   down #STATE   it is activating (loading, warming up), deactivating, inactive or failed
#   (no word)     systemctl gave no state: HAProxy's own /health check alone decides
# Only up and down, never ready/drain/maint: those change the server's admin state and would
# undo a drain the vllm_service role set through HAProxy's runtime API.
# POSIX sh and systemctl only: a check costs a few milliseconds (no interpreter start).
name=
IFS= read -r name || true
name=$(printf '%s' "$name" | tr -d '\r')
case "$name" in
  '' | *[!A-Za-z0-9_.-]*)
    echo "down #not an instance name"
    exit 0
    ;;
esac
if [ "${#name}" -gt 200 ]; then
  echo "down #not an instance name"
  exit 0
fi
state=$(systemctl is-active "vllm@$name.service" 2>/dev/null | head -n 1)
case "$state" in
  active | reloading) echo "up" ;;
  activating | deactivating | inactive | failed | maintenance | refreshing) echo "down #$state" ;;
  *) echo "#no state from systemctl" ;;
esac
exit 0
