#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_kv_cache_info
short_description: Report the KV-cache capacity and usage of a vLLM server
version_added: "0.1.0"
description:
  - Reads C(GET /metrics) of a vLLM server and reports, per engine (label C(engine)) and per
    served model (label C(model_name)), the KV-cache capacity from the labels of
    C(vllm:cache_config_info) (C(kv_cache_size_tokens), C(num_gpu_blocks), C(block_size),
    C(cache_dtype), C(kv_cache_max_concurrency), C(gpu_memory_utilization),
    C(enable_prefix_caching)) and its usage (C(vllm:kv_cache_usage_perc), or the older
    C(vllm:gpu_cache_usage_perc); requests running and waiting; preemptions; prefix-cache hit
    rate = hits / queries; prompt and generation token totals since start).
  - "When the server runs with C(--disable-log-stats) there are no C(vllm:) metrics. With O(unit)
    given, the module then reads the startup line
    C(GPU KV cache size: N tokens, Maximum concurrency for M tokens per request: Cx)
    (C(CPU KV cache size: ...) on CPU) of the latest start from the unit's journal. RV(source)
    says which source was used."
  - Read-only; C(changed) is always C(false); check mode runs the same reads. An unreachable
    server is reported as data (RV(source=none), RV(error)).
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests) and C(prometheus_client)).
extends_documentation_fragment:
  - llmops.serving.vllm
  - llmops.serving.vllm.validate_certs
options:
  unit:
    description: systemd unit whose journal holds the startup log (journal fallback).
    type: str
  source:
    description:
      - C(auto) = metrics, else the journal of O(unit). C(metrics) or C(journal) force one source.
    type: str
    choices: [auto, metrics, journal]
    default: auto
  journal_lines:
    description: How many of the unit's last journal lines to search for the startup log.
    type: int
    default: 5000
requirements:
  - prometheus_client (in the vLLM virtualenv)
seealso:
  - module: llmops.serving.vllm_health
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: KV cache of one instance
  llmops.serving.vllm_kv_cache_info:
    url: http://127.0.0.1:8000
    unit: vllm@default.service
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  register: kv

- name: Fail when fewer than 64 requests of max_model_len fit in the KV cache
  ansible.builtin.assert:
    that: kv.models['tiny'].kv_cache_max_concurrency >= 64
"""

RETURN = r"""
source:
  description: C(metrics), C(journal), or C(none) when neither gave data.
  returned: always
  type: str
  sample: metrics
url:
  description: Base URL read.
  returned: always
  type: str
engines:
  description: One entry per (engine, model_name).
  returned: always
  type: list
  elements: dict
  contains:
    engine: {description: Engine index (label C(engine); data-parallel rank)., type: str}
    model_name: {description: Served model name (label C(model_name))., type: str}
    device:
      description: C(GPU)/C(CPU)/... from the startup line.
      type: str
      returned: when source is journal
    usage_metric:
      description: KV usage family found (C(vllm:kv_cache_usage_perc) or the older C(vllm:gpu_cache_usage_perc)).
      type: str
    capacity:
      description: >-
        C(kv_cache_size_tokens), C(num_gpu_blocks), C(block_size), C(cache_dtype),
        C(kv_cache_max_concurrency), C(gpu_memory_utilization), C(enable_prefix_caching),
        C(kv_cache_memory_bytes) (metrics); C(kv_cache_size_tokens), C(kv_cache_max_concurrency),
        C(max_tokens_per_request) (journal).
      type: dict
    usage:
      description: >-
        C(kv_cache_usage_perc) (0..1), C(num_requests_running), C(num_requests_waiting),
        C(num_preemptions), C(prefix_cache_queries), C(prefix_cache_hits),
        C(prefix_cache_hit_rate) (null without queries), C(prompt_tokens), C(generation_tokens).
        Empty with the journal source.
      type: dict
  sample:
    - engine: "0"
      model_name: tiny
      usage_metric: vllm:kv_cache_usage_perc
      capacity: {kv_cache_size_tokens: 2097152, num_gpu_blocks: 16384, block_size: 128, cache_dtype: auto,
                 kv_cache_max_concurrency: 4096.0, gpu_memory_utilization: 0.92, enable_prefix_caching: true}
      usage: {kv_cache_usage_perc: 0.0, num_requests_running: 0, num_requests_waiting: 0, num_preemptions: 0,
              prefix_cache_queries: 53, prefix_cache_hits: 0, prefix_cache_hit_rate: 0.0, prompt_tokens: 53,
              generation_tokens: 88}
models:
  description: >-
    Per served model, summed over its engines (token capacity, concurrency, requests, token
    totals), with C(kv_cache_usage_perc) the fullest engine's and the engine list.
  returned: always
  type: dict
  sample: {tiny: {engines: ["0"], kv_cache_size_tokens: 2097152, kv_cache_max_concurrency: 4096.0,
                  kv_cache_usage_perc: 0.0, num_requests_running: 0, prefix_cache_hit_rate: 0.0}}
metrics_probe:
  description: Status and latency of C(GET /metrics) (null when not read).
  returned: always
  type: dict
error:
  description: Why no data was found (null when some was).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    HAS_REQUESTS, REQUESTS_IMPORT_ERROR, VllmClient, connection_argument_spec, resolve_api_key, require_libs)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_metrics import (
    HAS_PROMETHEUS_CLIENT, PROMETHEUS_CLIENT_IMPORT_ERROR)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_kv_read import read_kv_cache


def main():
    module = AnsibleModule(
        argument_spec=dict(
            connection_argument_spec(timeout=10),
            unit=dict(type="str"),
            source=dict(type="str", choices=["auto", "metrics", "journal"], default="auto"),
            journal_lines=dict(type="int", default=5000),
        ),
        supports_check_mode=True,
    )
    require_libs(module, (("requests", HAS_REQUESTS, REQUESTS_IMPORT_ERROR),
                          ("prometheus_client", HAS_PROMETHEUS_CLIENT, PROMETHEUS_CLIENT_IMPORT_ERROR)))
    p = module.params
    if p["source"] == "journal" and not p["unit"]:
        module.fail_json(msg="source=journal needs unit (the systemd unit whose journal holds the startup log)")
    client = VllmClient(p["url"], api_key=resolve_api_key(module), timeout=p["timeout"], validate_certs=p["validate_certs"])
    result = read_kv_cache(client, p["unit"], p["source"], p["journal_lines"], runner=module.run_command)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
