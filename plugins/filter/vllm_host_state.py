# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Questions to the vllm_host_state module's result: is a write task a no-op?

The rules live in module_utils/vllm_host_state.py (file_same, file_set_same).
Docs: vllm_file_same.yml, vllm_existing_paths.yml, vllm_state_paths.yml, vllm_model_stats.yml next to this file. The file_set
action plugin (its host_state) applies file_set_same itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_host_state as hs


def vllm_file_same(stat, content, mode="0644", owner="root", group="root"):
    if not isinstance(stat, dict):
        raise AnsibleFilterError("vllm_file_same expects a stat of the vllm_host_state module's files, got %s"
                                 % type(stat).__name__)
    return hs.file_same(stat, hs.sha1_text(content), mode, owner, group)


def vllm_existing_paths(paths, stats):
    if not isinstance(stats, dict):
        raise AnsibleFilterError("vllm_existing_paths expects the vllm_host_state module's files, got %s"
                                 % type(stats).__name__)
    return hs.existing(paths, stats)


def vllm_state_paths(view, paths=None, file_sets=None):
    return hs.state_paths(view, paths, file_sets)


def vllm_model_stats(view, files):
    if not isinstance(files, dict):
        raise AnsibleFilterError("vllm_model_stats expects the vllm_host_state module's files, got %s"
                                 % type(files).__name__)
    return hs.model_stats(view, files)


class FilterModule(object):
    def filters(self):
        return {
            "vllm_file_same": vllm_file_same,
            "vllm_existing_paths": vllm_existing_paths,
            "vllm_state_paths": vllm_state_paths,
            "vllm_model_stats": vllm_model_stats,
        }
