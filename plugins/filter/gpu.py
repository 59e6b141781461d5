# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the gpu_preflight role: the preflight report and the instances it checks."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: gpu_preflight_report.yml and gpu_preflight_instances.yml beside this file.

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
from ansible_collections.llmops.serving.plugins.module_utils.gpu import memory


def _settings(facts, settings):
    """The role's settings as the checks take them: each instance with its prediction (``predictions``: the
    vllm_kv_predict entries, in order), each disk entry with its facts (llmops_gpu.disk, in order), typed values."""
    s = dict(settings or {})
    if "predictions" in s:
        s["instances"] = [dict(i, **p) for i, p in zip(s.get("instances") or [], s.pop("predictions") or [])]
    if "disk" in s:
        s["disk"] = [dict(f, **d) for f, d in zip(facts.get("disk") or [], s.get("disk") or [])]
    if "cuda_build" in s:
        s["cuda_build"] = str(s["cuda_build"])
    for key, var in (("reserve_gib", "gpu_preflight_reserve_gib"),):
        if key in s:
            try:
                s[key] = float(s[key])
            except (TypeError, ValueError):
                raise AnsibleFilterError("%s must be a number (GiB), got %r" % (var, s[key]))
    for key in ("require_nvcc", "fail_on_warnings"):
        if key in s:
            s[key] = boolean(s[key], strict=False)
    return s


def gpu_preflight_report(facts, settings):
    if not isinstance(facts, dict) or "mode" not in facts:
        raise AnsibleFilterError("gpu_preflight_report expects llmops_gpu facts (from llmops.serving.gpu_info)")
    report = checks.preflight_report(facts, _settings(facts, settings))
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


class FilterModule(object):
    def filters(self):
        return {
            "gpu_preflight_report": gpu_preflight_report,
            "gpu_preflight_instances": gpu_preflight_instances,
        }
