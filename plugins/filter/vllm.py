# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters that render vLLM options as data into argv and systemd lines."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args


def vllm_cli_args(options):
    if options is None:
        return []
    if not isinstance(options, dict):
        raise AnsibleFilterError("vllm_cli_args expects a dict of vLLM options, got %s" % type(options).__name__)
    return vllm_args.render_args(options)


def vllm_instance_argv(instance, python, common_args=None):
    if not isinstance(instance, dict) or "model" not in instance:
        raise AnsibleFilterError("vllm_instance_argv expects an instance dict with a 'model' key")
    return vllm_args.instance_argv(instance, python, common_args)


def systemd_exec_quote(argv):
    if isinstance(argv, str):
        return vllm_args.systemd_quote(argv)
    return vllm_args.systemd_exec(argv)


def vllm_args_setting(instances, common_args, option):
    """vllm_instances, vllm_common_args -> the variables that set ``option`` (module_utils/vllm_args.py)."""
    if not isinstance(common_args or {}, dict):
        raise AnsibleFilterError("vllm_args_setting expects vllm_common_args as a dict, got %s" % type(common_args).__name__)
    return vllm_args.args_setting(instances, common_args, option)


class FilterModule(object):
    def filters(self):
        return {
            "vllm_cli_args": vllm_cli_args,
            "vllm_instance_argv": vllm_instance_argv,
            "systemd_exec_quote": systemd_exec_quote,
            "vllm_args_setting": vllm_args_setting,
        }
