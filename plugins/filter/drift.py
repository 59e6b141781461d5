# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters that build the drift report (playbooks/drift.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import drift, drift_gateway_venv


def vllm_drift_rows(data, host):
    if not isinstance(data, dict) or "instances" not in data:
        raise AnsibleFilterError("vllm_drift_rows expects a dict with at least 'instances' (see playbooks/drift.yml)")
    return drift.vllm_rows(host, data)


def flash_attn_drift_rows(data, host):
    if not isinstance(data, dict):
        raise AnsibleFilterError("flash_attn_drift_rows expects a dict (see playbooks/drift.yml)")
    return drift.flash_attn_rows(host, data)


def drift_unreachable_rows(all_hosts, ok_hosts):
    return drift.unreachable_rows(all_hosts, ok_hosts)


def drift_collect(targets, hostvars):
    if not isinstance(targets, dict):
        raise AnsibleFilterError("drift_collect expects {component: [hosts]} (see playbooks/drift.yml)")
    return drift.collect(hostvars, targets)


def drift_table(rows):
    if not isinstance(rows, list):
        raise AnsibleFilterError("drift_table expects a list of drift rows")
    return drift.drift_table(rows)


def gpustack_drift_rows(data, host):
    if not isinstance(data, dict) or "install_method" not in data:
        raise AnsibleFilterError("gpustack_drift_rows expects a dict with at least 'install_method' (see playbooks/drift.yml)")
    return drift.gpustack_rows(host, data)


def gpustack_model_drift_rows(results, host):
    if not isinstance(results, dict):
        raise AnsibleFilterError("gpustack_model_drift_rows expects the registered loop result of llmops.serving.gpustack_model")
    return drift.gpustack_model_rows(host, results)


def gateway_drift_rows(data, host):
    if not isinstance(data, dict):
        raise AnsibleFilterError("gateway_drift_rows expects a dict (see roles/gateway/tasks/drift.yml)")
    return drift_gateway_venv.gateway_rows(host, data)


def vllm_venv_drift_rows(data, host):
    if not isinstance(data, dict):
        raise AnsibleFilterError("vllm_venv_drift_rows expects a dict with 'venv' and 'cmdlines' (see roles/vllm_service/tasks/drift.yml)")
    return drift_gateway_venv.venv_in_use_rows(host, data)


class FilterModule(object):
    def filters(self):
        return {
            "vllm_drift_rows": vllm_drift_rows,
            "vllm_venv_drift_rows": vllm_venv_drift_rows,
            "gateway_drift_rows": gateway_drift_rows,
            "drift_unreachable_rows": drift_unreachable_rows,
            "flash_attn_drift_rows": flash_attn_drift_rows,
            "drift_table": drift_table,
            "drift_collect": drift_collect,
            "gpustack_drift_rows": gpustack_drift_rows,
            "gpustack_model_drift_rows": gpustack_model_drift_rows,
        }
