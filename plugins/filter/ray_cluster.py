# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Ray cluster membership from `ray status` (docs: ray_membership.yml).
The rules are in module_utils/vllm_multinode.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode


def ray_membership(status_text, expected):
    if not isinstance(expected, dict):
        raise AnsibleFilterError("ray_membership expects {node: {resource: amount}}, got %s"
                                 % type(expected).__name__)
    return vllm_multinode.membership(expected, vllm_multinode.parse_ray_status(status_text or ""))


class FilterModule(object):
    def filters(self):
        return {"ray_membership": ray_membership}
