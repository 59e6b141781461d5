#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_report
short_description: The fleet report's reads of every vLLM instance on a host, in one module run
version_added: "0.4.0"
description:
  - For each instance of O(instances) (the vllm_service role's instance view, C(vllm_view)), the health
    and readiness probes of M(llmops.serving.vllm_health), the KV cache of
    M(llmops.serving.vllm_kv_cache_info), and, when the instance is ready, the small warmup of
    M(llmops.serving.vllm_warmup); and once for the host the KV prediction of
    M(llmops.serving.vllm_kv_predict). The same code as those modules (module_utils), with their
    defaults, so each part of the result has the shape of that module's result.
  - One module run per host instead of one per instance and read (4 per instance). This is what
    C(playbooks/report.yml) runs. On the demo host a no-op C(site.yml) spent 2.6 s in the four module
    runs of one instance; docs/benchmarks.md has the figures.
  - Read-only; C(changed) is always C(false). In check mode the probes run and the warmup sends
    nothing (as M(llmops.serving.vllm_warmup) does). An instance that is down is reported as data
    (its C(health.state)); a failed warmup is data too (C(warmup.ok=false), C(warmup.errors)).
  - The API key of an instance with C(has_api_key) is read on the host from its root-only
    environment file (C(env_path)), never from the controller, and masked in the result; run the task
    with C(become) and C(no_log) when an instance has a key.
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests) and C(prometheus_client)).
extends_documentation_fragment:
  - llmops.serving.vllm.validate_certs
options:
  instances:
    description:
      - The instances, as the instance view gives them. Read per instance are C(name), C(url), C(unit),
        C(served_name), C(has_api_key), C(env_path), and for the prediction C(model),
        C(max_model_len), C(gpus), C(gpu_memory_utilization), C(tensor_parallel_size),
        C(pipeline_parallel_size) and C(args); for an instance that spans hosts C(serves_http), C(node_rank)
        and C(nodes).
    type: list
    elements: dict
    required: true
  gpus:
    description: The host's GPUs (C(llmops_gpu.gpus) of M(llmops.serving.gpu_info)), for the prediction.
    type: list
    elements: dict
    default: []
  cpu_kvcache_space_gib:
    description: KV space of the CPU build in GiB (C(VLLM_CPU_KVCACHE_SPACE)), for the prediction.
    type: float
  timeout:
    description: Timeout of each probe request, in seconds.
    type: float
    default: 10
  warmup:
    description: Send the warmup to each ready instance.
    type: bool
    default: true
  warmup_prompt_lens:
    description: Prompt lengths of the warmup requests (cycled), as in M(llmops.serving.vllm_warmup).
    type: list
    elements: int
    default: [16, 64]
  warmup_max_tokens:
    description: C(max_tokens) of each warmup request.
    type: int
    default: 8
  warmup_count:
    description: Number of warmup requests per instance (the first runs alone, cold).
    type: int
    default: 4
  warmup_concurrency:
    description: Concurrent warmup requests after the first.
    type: int
    default: 2
  warmup_timeout:
    description: Timeout of each warmup request, in seconds.
    type: float
    default: 120
requirements:
  - requests and prometheus_client (in the vLLM virtualenv)
seealso:
  - module: llmops.serving.vllm_health
  - module: llmops.serving.vllm_kv_cache_info
  - module: llmops.serving.vllm_kv_predict
  - module: llmops.serving.vllm_warmup
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Health, KV cache (measured and predicted) and a warmup of every instance of the host
  llmops.serving.vllm_report:
    instances: "{{ vllm_view }}"
    gpus: "{{ llmops_gpu.gpus | default([]) }}"
  vars:
    ansible_python_interpreter: "{{ (vllm_view | first).python }}"
  become: true
  no_log: "{{ vllm_view | selectattr('has_api_key') | list | length > 0 }}"
  register: report

- name: Every instance is ready
  ansible.builtin.assert:
    that: report.instances | map(attribute='health.state') | unique == ['ready']
"""

RETURN = r"""
instances:
  description: One entry per instance of O(instances), in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The instance's name.
      type: str
    health:
      description:
        - The result of M(llmops.serving.vllm_health) (no wait) for the instance.
        - "For the headless part of an instance that spans hosts (C(serves_http=false): ranks only, no HTTP on this
          node) the unit's state only: C(state) is C(headless) (unit active), C(starting) or C(dead), C(reason)
          names the rank and the head; C(kv) is empty and the warmup skipped."
      type: dict
    kv:
      description: The result of M(llmops.serving.vllm_kv_cache_info) for the instance.
      type: dict
    predicted:
      description: The instance's entry of M(llmops.serving.vllm_kv_predict)'s RV(instances) (C(kv), C(weights), C(kv_skipped)).
      type: dict
    warmup:
      description:
        - The result of M(llmops.serving.vllm_warmup) without its per-request records, with
          C(fail_on_error=false).
        - "C({skipped: true, reason: ...}) when the instance is not ready, O(warmup) is false or in check mode."
      type: dict
device:
  description: C(cuda) or C(cpu), the device the prediction used.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.kv_predict import PREDICT_DEFAULTS, KvPredictor
from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    VllmClient, env_file_api_key, require_libs, unit_state)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_kv_read import read_kv_cache
from ansible_collections.llmops.serving.plugins.module_utils.vllm_metrics import (
    HAS_PROMETHEUS_CLIENT, PROMETHEUS_CLIENT_IMPORT_ERROR)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_probe import PROBE_DEFAULTS, probe, restart_fields
from ansible_collections.llmops.serving.plugins.module_utils.vllm_warmup import (
    HAS_REQUESTS, REQUESTS_IMPORT_ERROR, WarmupError, run_warmup)


class InstanceReport(object):
    """The reads of one host's instances, in the order the fleet report shows them."""

    def __init__(self, module):
        self.module = module
        self.p = module.params

    def api_key(self, inst):
        return env_file_api_key(self.module, inst.get("env_path")) if inst.get("has_api_key") else None

    def warmup(self, inst, health, key):
        if not self.p["warmup"]:
            return {"skipped": True, "reason": "warmup is false"}
        if health["state"] != "ready":
            return {"skipped": True, "reason": "instance is %s" % health["state"]}
        if self.module.check_mode:
            return {"skipped": True, "reason": "check mode: no request sent"}
        try:
            result = run_warmup(inst["url"], model=health["model"], prompt_lens=self.p["warmup_prompt_lens"],
                                max_tokens=self.p["warmup_max_tokens"], count=self.p["warmup_count"],
                                concurrency=self.p["warmup_concurrency"], api_key=key,
                                timeout=self.p["warmup_timeout"])
        except WarmupError as e:
            return {"ok": False, "errors": [str(e)]}
        result.pop("requests", None)
        return result

    def headless(self, inst):
        """The headless part of a spanning instance (C(serves_http) false): ranks only, no HTTP on this
        node; its state is its unit's (the head's row names the instance's state)."""
        unit = unit_state(inst.get("unit"), runner=self.module.run_command)
        active = unit.get("active_state") if unit.get("known") else None
        state = {"active": "headless", "activating": "starting", "reloading": "starting"}.get(active, "dead")
        params = dict(PROBE_DEFAULTS, unit=inst.get("unit"))
        health = {"url": None, "state": state, "ready": False, "version": None, "model": inst.get("served_name"),
                  "max_model_len": None, "unit": unit, "changed": False,
                  "reason": "rank %s of instance %s (nodes %s): no HTTP API on this node, the head %s serves it; "
                            "unit %s is %s" % (inst.get("node_rank"), inst.get("name"),
                                               ", ".join(inst.get("nodes") or []), (inst.get("nodes") or ["?"])[0],
                                               inst.get("unit"), active or "unknown")}
        health["restarts"], health["watchdog"] = restart_fields(params, unit)
        return {"name": inst.get("name"), "health": health, "kv": {"source": "none", "models": {}, "engines": []},
                "predicted": None, "warmup": {"skipped": True, "reason": "headless part: no HTTP on this node"}}

    def one(self, inst, predicted):
        if inst.get("serves_http") is False:
            return self.headless(inst)
        key = self.api_key(inst)
        client = VllmClient(inst["url"], api_key=key, timeout=self.p["timeout"],
                            validate_certs=self.p["validate_certs"])
        params = dict(PROBE_DEFAULTS, unit=inst.get("unit"), model=inst.get("served_name"))
        health = dict(probe(params, client, runner=self.module.run_command), changed=False)
        unit = (health.get("unit") or {}).get("name") or inst.get("unit")
        # /metrics needs no key (vLLM guards /v1 only), as vllm_kv_cache_info is called.
        kv = read_kv_cache(VllmClient(inst["url"], timeout=self.p["timeout"], validate_certs=self.p["validate_certs"]),
                           unit, runner=self.module.run_command)
        return {"name": inst.get("name"), "health": health, "kv": kv, "predicted": predicted,
                "warmup": self.warmup(inst, health, key)}

    def run(self):
        insts = self.p["instances"]
        for inst in insts:
            if inst.get("serves_http") is not False and not str(inst.get("url", "")).startswith(("http://", "https://")):
                self.module.fail_json(msg="instances[%s].url must start with http:// or https:// (got %r)"
                                      % (inst.get("name"), inst.get("url")))
        prediction = KvPredictor(dict(PREDICT_DEFAULTS, instances=insts, gpus=self.p["gpus"],
                                      cpu_kvcache_space_gib=self.p["cpu_kvcache_space_gib"])).run()
        by_name = dict((e["name"], e) for e in prediction["instances"])
        return {"changed": False, "device": prediction["device"],
                "instances": [self.one(i, by_name.get(i.get("name"))) for i in insts]}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instances=dict(type="list", elements="dict", required=True),
            gpus=dict(type="list", elements="dict", default=[]),
            cpu_kvcache_space_gib=dict(type="float"),
            timeout=dict(type="float", default=10),
            validate_certs=dict(type="bool", default=True),
            warmup=dict(type="bool", default=True),
            warmup_prompt_lens=dict(type="list", elements="int", default=[16, 64]),
            warmup_max_tokens=dict(type="int", default=8, no_log=False),
            warmup_count=dict(type="int", default=4),
            warmup_concurrency=dict(type="int", default=2),
            warmup_timeout=dict(type="float", default=120),
        ),
        supports_check_mode=True,
    )
    require_libs(module, (("requests", HAS_REQUESTS, REQUESTS_IMPORT_ERROR),
                          ("prometheus_client", HAS_PROMETHEUS_CLIENT, PROMETHEUS_CLIENT_IMPORT_ERROR)))
    for name in ("warmup_max_tokens", "warmup_count", "warmup_concurrency"):
        if module.params[name] < 1:
            module.fail_json(msg="%s must be >= 1 (got %s)" % (name, module.params[name]))
    try:
        result = InstanceReport(module).run()
    except (OSError, ValueError) as e:
        module.fail_json(msg="vllm_report: %s" % e)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
