# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The instance view of vllm_service and the one key lookup.

Docs: vllm_instance_view.yml, vllm_instance_api_key.yml, vllm_preflight_problems.yml (and the others) next to this file.
vllm_args.py renders argv, vllm_flags/ validates options, and
module_utils/vllm_instance/ composes them into the view.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance
from ansible_collections.llmops.serving.plugins.module_utils import vllm_sleep


def vllm_instance_view(instances, settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_instance_view expects the settings dict as its argument, got %s"
                                 % type(settings).__name__)
    try:
        return vllm_instance.build_view(instances, settings)
    except vllm_instance.InstanceViewError as e:
        raise AnsibleFilterError(str(e))


def vllm_instance_paths(names, settings):
    """{name: paths} (module_utils/vllm_instance/view.py ``instance_paths``) of
    instance names the view may not list (removed instances, the snapshot)."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_instance_paths expects the settings dict as its argument, got %s"
                                 % type(settings).__name__)
    return dict((str(n), vllm_instance.instance_paths(str(n), settings)) for n in (names or []))


def vllm_snapshot_files(names, settings):
    """The files the rollback snapshot copies (module_utils/vllm_instance/view.py ``snapshot_files``)."""
    return vllm_instance.snapshot_files([str(n) for n in names or []], settings or {})


def vllm_preflight_problems(settings):
    """The role-wide settings vllm_service refuses before any change (module_utils/vllm_instance/preflight.py)."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_preflight_problems expects the settings dict, got %s" % type(settings).__name__)
    return vllm_instance.preflight_problems(settings)


def vllm_instance_api_key(name, api_key, api_keys):
    # Only instance.env.j2 calls this: the value never goes into a fact,
    # a loop or a module argument.
    return vllm_instance.instance_api_key(name, api_key, api_keys)


def vllm_instance_env(name, instances, settings):
    for inst in instances or []:
        if isinstance(inst, dict) and inst.get("name") == name:
            return vllm_instance.instance_env(inst, settings or {})
    raise AnsibleFilterError("vllm_instance_env: no instance named %r in vllm_instances" % (name,))


def vllm_swap_plan(view, sleep_name, wake_name, host="this host"):
    try:
        return vllm_sleep.swap_plan(view, sleep_name, wake_name, host)
    except vllm_sleep.SleepError as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self):
        return {
            "vllm_instance_view": vllm_instance_view,
            "vllm_instance_api_key": vllm_instance_api_key,
            "vllm_instance_paths": vllm_instance_paths,
            "vllm_snapshot_files": vllm_snapshot_files,
            "vllm_instance_env": vllm_instance_env,
            "vllm_swap_plan": vllm_swap_plan,
            "vllm_preflight_problems": vllm_preflight_problems,
        }
