# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The change plan of a vLLM host and what its rollback does (docs: vllm_plan.yml,
vllm_rollback_plan.yml, vllm_plan_summary.yml, vllm_lora_dropin_key.yml). The rules are in
module_utils/vllm_plan.py (and vllm_lora.py: the drop-in's key without its adapter list)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora
from ansible_collections.llmops.serving.plugins.module_utils import vllm_plan as vp


def vllm_plan(view, state, files, settings, batch_changed=None):
    if batch_changed is not None and not isinstance(batch_changed, dict):
        raise AnsibleFilterError("vllm_plan expects batch_changed as {node: [instance names]}, got %s"
                                 % type(batch_changed).__name__)
    try:
        return vp.plan(view, state, files, settings, batch_changed)
    except vp.PlanError as exc:
        raise AnsibleFilterError("vllm_plan: %s" % exc)


def vllm_rollback_plan(plan, snapshot):
    if not isinstance(plan, dict) or "restart" not in plan:
        raise AnsibleFilterError("vllm_rollback_plan expects the vllm_plan result, got %s" % type(plan).__name__)
    return vp.rollback(plan, snapshot)


def vllm_plan_summary(plan, ready=None):
    if not isinstance(plan, dict) or "restart" not in plan:
        raise AnsibleFilterError("vllm_plan_summary expects the vllm_plan result, got %s" % type(plan).__name__)
    return vp.summary(plan, ready if isinstance(ready, dict) else {})


def vllm_lora_dropin_key(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("vllm_lora_dropin_key expects a drop-in's text, got %s" % type(text).__name__)
    return vllm_lora.dropin_key(text)


class FilterModule(object):
    def filters(self):
        return {"vllm_plan": vllm_plan, "vllm_rollback_plan": vllm_rollback_plan, "vllm_plan_summary": vllm_plan_summary,
                "vllm_lora_dropin_key": vllm_lora_dropin_key}
