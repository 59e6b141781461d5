# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the gpu_preflight role: the preflight report, the instances it checks, a weights estimate."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_preflight_report
short_description: Run the GPU preflight checks on llmops.serving.gpu_info facts
version_added: "0.1.0"
description:
  - Returns C(checks) (per check C(status) pass/fail/warn/skip and C(messages)), C(order) (the check
    names in table order), C(failed), C(failures), C(warnings), C(flash_attn_supported), C(cuda_archs),
    C(placement) (instance -> GPU indices).
  - The memory and KV checks read C(settings.instances), the output of
    M(llmops.serving.vllm_kv_predict) (instance view entries with C(weights) and C(kv)).
  - Also provides C(gpu_preflight_instances) (the instance fields the checks read, from
    C(vllm_instances) and C(vllm_common_args)) and C(gpu_model_weights) (weights estimate from a
    model's config.json).
positional: settings
options:
  _input:
    description: The C(llmops_gpu) facts.
    type: dict
    required: true
  settings:
    description: Check settings (see roles/gpu_preflight).
    type: dict
    required: true
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
from ansible_collections.llmops.serving.plugins.module_utils.gpu import memory
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights


def gpu_preflight_report(facts, settings):
    if not isinstance(facts, dict) or "mode" not in facts:
        raise AnsibleFilterError("gpu_preflight_report expects llmops_gpu facts (from llmops.serving.gpu_info)")
    report = checks.preflight_report(facts, settings)
    report["order"] = [name for name, _fn in checks.CHECKS]
    return report


def gpu_preflight_instances(instances, common_args=None, default_gpu_memory_utilization=None):
    """The instance fields the preflight reads (no secrets).

    Interim: when vllm_instance.build_view lands, return
    ``[dict(v, args={}) for v in vllm_instance.build_view(instances, settings)]`` instead.
    """
    try:
        return memory.instance_fields(instances, common_args, default_gpu_memory_utilization)
    except memory.InstancePlanError as e:
        raise AnsibleFilterError(str(e))


def gpu_model_weights(config, params_b=None, dtype_bytes=None):
    try:
        return weights.estimate_weights(config or None, params_b or None, dtype_bytes or None)
    except (KeyError, ValueError, TypeError) as e:
        raise AnsibleFilterError("cannot estimate weights from the model config (missing/invalid %s); "
                                 "set gpu_preflight_model_params_b instead" % e)


class FilterModule(object):
    def filters(self):
        return {
            "gpu_preflight_report": gpu_preflight_report,
            "gpu_preflight_instances": gpu_preflight_instances,
            "gpu_model_weights": gpu_model_weights,
        }
