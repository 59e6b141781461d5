# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for GPUStack: config validation and deterministic GPU placement."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import gpustack_config, placement


def gpustack_config_errors(config, schema):
    return gpustack_config.validate_config(config, schema)


def gpustack_placement(workers, models, max_utilization=0.95):
    try:
        return placement.place(workers, models, max_utilization=float(max_utilization))
    except placement.PlacementError as e:
        raise AnsibleFilterError("gpustack_placement: %s" % e)


def gpustack_with_utilization(params, utilization):
    return placement.merge_backend_parameters(params, float(utilization))


class FilterModule(object):
    def filters(self):
        return {
            "gpustack_config_errors": gpustack_config_errors,
            "gpustack_placement": gpustack_placement,
            "gpustack_with_utilization": gpustack_with_utilization,
        }
