# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the gpu_preflight role: the preflight report, the instances it checks, a weights estimate."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: gpu_preflight_report.yml and gpu_model_weights.yml beside this file.

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
