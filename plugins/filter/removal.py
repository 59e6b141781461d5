# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the leftover check (playbooks/drift.yml) over module_utils/removal.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import removal


def leftover_components(component_groups, host, groups):
    if not isinstance(component_groups, dict):
        raise AnsibleFilterError("leftover_components expects {component: [groups]} (see playbooks/drift.yml), got %s"
                                 % type(component_groups).__name__)
    return removal.leftover_components(host, groups, component_groups)


def leftover_drift_rows(result, host, component, groups_named):
    if not isinstance(result, dict) or not isinstance(result.get("leftovers"), dict):
        raise AnsibleFilterError("leftover_drift_rows expects the registered result of llmops.serving.leftovers "
                                 "(see roles/*/tasks/leftovers.yml)")
    return removal.leftover_rows(host, component, groups_named, result["leftovers"])


class FilterModule(object):
    def filters(self):
        return {
            "leftover_components": leftover_components,
            "leftover_drift_rows": leftover_drift_rows,
        }
