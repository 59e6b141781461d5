# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters that build the drift report (playbooks/drift.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import drift
from ansible_collections.llmops.serving.plugins.module_utils.drift import flash_attn, gateway, gpustack, lora, ray, venv, vllm

PLAYBOOK = "playbooks/drift.yml"


def _kind(value):
    """What a wrong input is, in words (ansible-core 2.19 hands over lazy list/dict subclasses)."""
    if value is None:
        return "nothing (None)"
    for kind, name in ((dict, "a dict"), (str, "a string"), ((list, tuple), "a list"), (bool, "a boolean")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _rows(filter_name, data, host, fn, required=(), hint=PLAYBOOK, expects=None):
    """Check the input of a ``<component>_drift_rows`` filter, then ``fn(host, data)``.

    ``required``: keys ``data`` must have; ``hint``: where the input is built
    (named in the error); ``expects``: what the input is, in words (default:
    a dict with the required keys).
    """
    if not isinstance(data, dict) or any(k not in data for k in required):
        if expects is None:
            expects = "a dict with at least %s" % ", ".join("'%s'" % k for k in required) if required else "a dict"
        got = _kind(data) if not isinstance(data, dict) else "a dict without %s" % ", ".join(
            "'%s'" % k for k in required if k not in data)
        raise AnsibleFilterError("%s expects %s (see %s), got %s" % (filter_name, expects, hint, got))
    return fn(host, data)


def vllm_drift_rows(data, host):
    return _rows("vllm_drift_rows", data, host, vllm.vllm_rows, required=("view",))


def flash_attn_drift_rows(data, host):
    return _rows("flash_attn_drift_rows", data, host, flash_attn.flash_attn_rows)


def gpustack_drift_rows(data, host):
    return _rows("gpustack_drift_rows", data, host, gpustack.gpustack_rows, required=("install_method",))


def gpustack_model_drift_rows(results, host):
    return _rows("gpustack_model_drift_rows", results, host, gpustack.gpustack_model_rows,
                 hint="roles/gpustack/tasks/drift_models.yml",
                 expects="the registered loop result of llmops.serving.gpustack_model")


def gateway_drift_rows(data, host):
    return _rows("gateway_drift_rows", data, host, gateway.gateway_rows,
                 hint="roles/gateway/tasks/drift.yml")


def ray_drift_rows(data, host):
    return _rows("ray_drift_rows", data, host, ray.ray_rows, hint="roles/ray_cluster/tasks/drift.yml")


def vllm_venv_drift_rows(data, host):
    return _rows("vllm_venv_drift_rows", data, host, venv.venv_in_use_rows,
                 hint="roles/vllm_service/tasks/drift.yml", expects="a dict with 'venv' and 'cmdlines'")


def vllm_lora_drift_rows(data, host):
    return _rows("vllm_lora_drift_rows", data, host, lora.lora_rows, required=("results",),
                 hint="roles/vllm_service/tasks/drift.yml")


def drift_collect(targets, hostvars):
    if not isinstance(targets, dict):
        raise AnsibleFilterError("drift_collect expects {component: [hosts]} (see %s), got %s"
                                 % (PLAYBOOK, _kind(targets)))
    return drift.collect(hostvars, targets)


def drift_table(rows):
    if not isinstance(rows, list):
        raise AnsibleFilterError("drift_table expects a list of drift rows, got %s" % _kind(rows))
    return drift.drift_table(rows)


class FilterModule(object):
    def filters(self):
        return {
            "vllm_drift_rows": vllm_drift_rows,
            "vllm_venv_drift_rows": vllm_venv_drift_rows,
            "vllm_lora_drift_rows": vllm_lora_drift_rows,
            "gateway_drift_rows": gateway_drift_rows,
            "flash_attn_drift_rows": flash_attn_drift_rows,
            "drift_table": drift_table,
            "drift_collect": drift_collect,
            "gpustack_drift_rows": gpustack_drift_rows,
            "gpustack_model_drift_rows": gpustack_model_drift_rows,
            "ray_drift_rows": ray_drift_rows,
        }
