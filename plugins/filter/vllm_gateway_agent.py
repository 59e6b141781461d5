# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The gateway agent of a vLLM host: where it listens, what the gateway is told, its drift rows.

Docs: vllm_gateway_agent.yml and vllm_gateway_agent_drift_rows.yml next to this file; the rules
are in module_utils/vllm_gateway_agent.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_gateway_agent as agent_rules


def vllm_gateway_agent(views, settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_gateway_agent expects the settings dict (port, address, fronted), got %s"
                                 % type(settings).__name__)
    return agent_rules.plan(views, settings)


def vllm_gateway_agent_drift_rows(data, host):
    if not isinstance(data, dict):
        raise AnsibleFilterError("vllm_gateway_agent_drift_rows expects a dict (see roles/vllm_service/tasks/drift.yml)")
    return agent_rules.drift_rows(host, data)


class FilterModule(object):
    def filters(self):
        return {
            "vllm_gateway_agent": vllm_gateway_agent,
            "vllm_gateway_agent_drift_rows": vllm_gateway_agent_drift_rows,
        }
