# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Which API a load test drives, and how each load generator drives it.

``verify_api`` picks the API family the clients of the fleet use:

- ``openai``: ``/v1/completions`` (default) or ``/v1/chat/completions``, with
  EvalScope (``--api openai``) or ``vllm bench serve`` (backend ``vllm`` /
  ``openai-chat``); both can force the output length (``ignore_eos``).
- ``anthropic``: ``/v1/messages`` (the Anthropic Messages API that vLLM 0.32
  serves), with ``vllm bench serve`` only: the role's wrapper
  (``roles/verify/files/vllm_bench_serve.py``) registers the request function
  ``anthropic-messages``, which sends each request with the Anthropic SDK (the
  ``anthropic`` package of the vLLM venv) and times its streamed events; vllm
  bench schedules, bounds and measures as for every backend, so the results,
  SLO checks and reports are the same. EvalScope 1.14.1 has no Anthropic API
  plugin. The Messages API has no ``ignore_eos``: output lengths are the
  model's (``ignore_eos`` is false in the plan).

Pure functions (stdlib only).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.loadtest.results import LoadTestError

# api -> endpoint -> {tool: request function / API name of that tool}
APIS = {
    "openai": {
        "/v1/completions": {"evalscope": "openai", "vllm_bench": "vllm"},
        "/v1/chat/completions": {"evalscope": "openai", "vllm_bench": "openai-chat"},
    },
    "anthropic": {
        "/v1/messages": {"vllm_bench": "anthropic-messages"},
    },
}
# The endpoint of an API when verify_endpoint is empty.
DEFAULT_ENDPOINTS = {"openai": "/v1/completions", "anthropic": "/v1/messages"}
# APIs whose requests can carry vLLM's ignore_eos (force verify_output_len tokens).
FORCES_OUTPUT_LEN = ("openai",)
# Request functions that only the role's vllm bench wrapper knows (not `vllm bench serve` itself).
WRAPPER_BACKENDS = ("anthropic-messages",)


def load_plan(api, tool, endpoint="", ignore_eos=True):
    """``{api, tool, endpoint, backend, ignore_eos, wrapper}`` for the verify role.

    ``backend``: vllm bench's ``--backend`` or EvalScope's ``--api``;
    ``wrapper``: vllm bench must run through the role's wrapper (its own
    request function). Raises ``LoadTestError`` naming the variable to change.
    """
    api = str(api or "")
    if api not in APIS:
        raise LoadTestError("verify_api must be one of %s, got %r" % (", ".join(sorted(APIS)), api))
    endpoint = str(endpoint or "") or DEFAULT_ENDPOINTS[api]
    if endpoint not in APIS[api]:
        raise LoadTestError(
            "verify_endpoint %s is not a path of the %s API: use %s (or leave verify_endpoint empty)"
            % (endpoint, api, " or ".join(sorted(APIS[api]))))
    tools = APIS[api][endpoint]
    if tool not in tools:
        known = ("evalscope", "vllm_bench")
        if tool not in known:
            raise LoadTestError("verify_tool must be evalscope or vllm_bench, got %r" % (tool,))
        raise LoadTestError(
            "verify_tool=%s cannot drive the %s API (%s): use verify_tool=%s%s"
            % (tool, api, endpoint, " or ".join(sorted(tools)),
               " (EvalScope 1.14.1 has no Anthropic API; vllm bench sends it with the Anthropic SDK)"
               if api == "anthropic" else ""))
    backend = tools[tool]
    return dict(api=api, tool=tool, endpoint=endpoint, backend=backend,
                ignore_eos=bool(ignore_eos) and api in FORCES_OUTPUT_LEN,
                wrapper=backend in WRAPPER_BACKENDS)
