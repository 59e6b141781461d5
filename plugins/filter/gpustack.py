# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for GPUStack: config validation and deterministic GPU placement."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpustack_placement
short_description: Deterministic GPU placement for GPUStack models
version_added: "0.1.0"
description:
  - Given the GPUs of each worker (gpu_info style, per GPU C(index), C(name),
    C(memory_total_mib), optional C(memory_used_mib)) and models with a memory
    budget per GPU, returns per model C(gpu_selector) and
    C(--gpu-memory-utilization=<x>). Same inventory, same placement.
  - Other filters in this file - C(gpustack_config_errors(config, schema)) returns
    the list of config errors (unknown/fictional keys, types, enums);
    C(gpustack_with_utilization(params, x)) replaces the utilisation flag in a
    backend_parameters list.
options:
  _input:
    description: Workers, C({worker: [gpu, ...]}) or C({worker: {gpus: [...], system_reserved_mib: N}}).
    type: raw
    required: true
  models:
    description: List of C({name, memory_mib|memory_gib, gpus}).
    type: list
    required: true
  max_utilization:
    description: Largest allowed utilisation.
    type: float
    default: 0.95
"""

EXAMPLES = r"""
placement: "{{ gpustack_gpu_inventory | llmops.serving.gpustack_placement(gpustack_models) }}"
"""

RETURN = r"""
_value:
  description: C({model: {worker, gpu_indexes, gpu_selector, gpu_memory_utilization, backend_parameter}}).
  type: dict
"""

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
