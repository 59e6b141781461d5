#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_warmup
short_description: Warm a vLLM server with production-shaped traffic and report TTFT and latency
version_added: "0.1.0"
description:
  - Sends O(count) streamed C(/v1/completions) requests whose prompt lengths follow a list
    (O(prompt_lens), cycled) or a histogram (O(prompt_len_histogram)), with O(max_tokens) each.
    The first request runs alone (cold); the others run O(concurrency) at a time (warm).
  - Reports, per request, the time to first token (TTFT, measured on the stream), the end-to-end
    latency and the token counts, and p50/p99 of TTFT and end-to-end latency of the warm
    requests, next to the cold request.
  - Any request error fails the task (set O(fail_on_error=false) to get it as data).
  - The same code (C(plugins/module_utils/vllm_warmup.py)) runs on hosts without Ansible as the
    service's warmup hook (C(ExecStartPost)); see C(docs/modules/vllm_warmup.md) for its
    command line.
  - Warmup traffic changes no configuration, so C(changed) is always C(false). In check mode no
    request is sent; the planned prompt lengths are returned.
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests)).
extends_documentation_fragment:
  - llmops.serving.vllm
options:
  model:
    description: Served model name. Default is the first id of C(/v1/models).
    type: str
  prompt_lens:
    description: Prompt lengths in tokens, cycled over the requests.
    type: list
    elements: int
  prompt_len_histogram:
    description:
      - "Prompt length (tokens) to weight, for example C({16: 3, 256: 1}). Lengths are given to
        the requests in proportion to the weights, interleaved. Mutually exclusive with O(prompt_lens)."
      - Without either option, C([16, 64]) is used.
    type: dict
  max_tokens:
    description: Tokens generated per request (EOS is ignored so each request produces exactly this many).
    type: int
    default: 16
  count:
    description: Number of requests, the cold one included.
    type: int
    default: 8
  concurrency:
    description: Requests in flight at once after the cold request.
    type: int
    default: 1
  timeout:
    description: Timeout of each request, in seconds.
    type: float
    default: 120
  wait_ready_timeout:
    description: Seconds to wait for C(/health) 200 before warming (0 = do not wait).
    type: float
    default: 0
  prompt_format:
    description:
      - C(tokens) sends token-id lists (exact lengths, no tokenizer needed); C(text) sends words
        (about one token each) for servers that only take text prompts.
    type: str
    choices: [tokens, text]
    default: tokens
  fail_on_error:
    description: Fail the task when any request fails.
    type: bool
    default: true
  return_requests:
    description: Return the per-request records in RV(requests).
    type: bool
    default: true
seealso:
  - module: llmops.serving.vllm_health
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Warm with a production mix (3 short prompts per long one), 4 at a time
  llmops.serving.vllm_warmup:
    url: http://127.0.0.1:8000
    prompt_len_histogram: {128: 3, 2048: 1}
    max_tokens: 64
    count: 32
    concurrency: 4
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  register: warm

- name: Show the warm TTFT
  ansible.builtin.debug:
    msg: "cold TTFT {{ warm.cold.ttft_s }} s, warm TTFT p50 {{ warm.warm.ttft_p50_s }} s"
"""

RETURN = r"""
ok:
  description: Every request succeeded.
  returned: always
  type: bool
model:
  description: Model warmed.
  returned: when requests were sent
  type: str
prompt_lens:
  description: Prompt length of each request, in order.
  returned: always
  type: list
  elements: int
  sample: [16, 64, 16, 64]
cold:
  description: The first request (C(ttft_s), C(e2e_s), C(prompt_len), C(completion_tokens), C(error)).
  returned: when requests were sent
  type: dict
  sample: {index: 0, prompt_len: 16, ttft_s: 0.0091, e2e_s: 0.062, completion_tokens: 16, error: null}
warm:
  description: >-
    Statistics of the other requests: C(count), C(ok), C(errors), C(ttft_p50_s), C(ttft_p99_s),
    C(ttft_max_s), C(e2e_p50_s), C(e2e_p99_s), C(e2e_max_s) (null when no warm request succeeded).
  returned: when requests were sent
  type: dict
  sample: {count: 7, ok: 7, errors: 0, ttft_p50_s: 0.021, ttft_p99_s: 0.08, e2e_p50_s: 0.156, e2e_p99_s: 0.185}
all:
  description: The same statistics over all requests.
  returned: when requests were sent
  type: dict
requests:
  description: One record per request (C(index), C(prompt_len), C(prompt_tokens), C(max_tokens), C(ttft_s),
    C(e2e_s), C(completion_tokens), C(error)).
  returned: when requests were sent and O(return_requests=true)
  type: list
  elements: dict
errors:
  description: Error messages, one per failed request.
  returned: always
  type: list
  elements: str
waited_s:
  description: Seconds waited for C(/health) (null when O(wait_ready_timeout=0)).
  returned: when requests were sent
  type: float
duration_s:
  description: Wall time of the warmup traffic.
  returned: when requests were sent
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    connection_argument_spec, resolve_api_key, require_libs)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_warmup import (
    HAS_REQUESTS, REQUESTS_IMPORT_ERROR, WarmupError, plan_prompt_lengths, run_warmup)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            connection_argument_spec(timeout=120, with_validate_certs=False),
            model=dict(type="str"),
            prompt_lens=dict(type="list", elements="int"),
            prompt_len_histogram=dict(type="dict"),
            max_tokens=dict(type="int", default=16, no_log=False),
            count=dict(type="int", default=8),
            concurrency=dict(type="int", default=1),
            wait_ready_timeout=dict(type="float", default=0),
            prompt_format=dict(type="str", choices=["tokens", "text"], default="tokens"),
            fail_on_error=dict(type="bool", default=True),
            return_requests=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("prompt_lens", "prompt_len_histogram")],
        supports_check_mode=True,
    )
    require_libs(module, (("requests", HAS_REQUESTS, REQUESTS_IMPORT_ERROR),))
    p = module.params
    lens = p["prompt_lens"]
    hist = None
    if p["prompt_len_histogram"]:
        try:
            hist = dict((int(k), float(v)) for k, v in p["prompt_len_histogram"].items())
        except (TypeError, ValueError):
            module.fail_json(msg="prompt_len_histogram must map prompt lengths (int) to weights (number), "
                                 "got %r" % p["prompt_len_histogram"])
    elif not lens:
        lens = [16, 64]
    for name in ("max_tokens", "count", "concurrency"):
        if p[name] < 1:
            module.fail_json(msg="%s must be >= 1 (got %s)" % (name, p[name]))
    try:
        plan = plan_prompt_lengths(p["count"], lens, hist)
    except WarmupError as e:
        module.fail_json(msg=str(e))
    if module.check_mode:
        module.exit_json(changed=False, ok=True, prompt_lens=plan, errors=[],
                         msg="check mode: no request sent")
    try:
        result = run_warmup(p["url"], model=p["model"], prompt_lens=lens, histogram=hist,
                            max_tokens=p["max_tokens"], count=p["count"], concurrency=p["concurrency"],
                            api_key=resolve_api_key(module), timeout=p["timeout"],
                            wait_ready_timeout=p["wait_ready_timeout"], prompt_format=p["prompt_format"])
    except WarmupError as e:
        if p["fail_on_error"]:
            module.fail_json(msg="warmup of %s failed: %s" % (p["url"], e), ok=False, errors=[str(e)],
                             prompt_lens=plan)
        module.exit_json(changed=False, ok=False, errors=[str(e)], prompt_lens=plan)
    if not p["return_requests"]:
        result.pop("requests", None)
    result["changed"] = False
    if not result["ok"] and p["fail_on_error"]:
        module.fail_json(msg="warmup of %s: %d of %d requests failed: %s"
                         % (result["url"], len(result["errors"]), result["all"]["count"], result["errors"][0]),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
