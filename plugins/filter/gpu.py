# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the gpu_preflight role: model weights estimate and the preflight report."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: gpu_preflight_report.yml and gpu_model_weights.yml beside this file.

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import gpu as gpu_utils


def gpu_preflight_report(facts, settings):
    if not isinstance(facts, dict) or "mode" not in facts:
        raise AnsibleFilterError("gpu_preflight_report expects llmops_gpu facts (from llmops.serving.gpu_info)")
    return gpu_utils.preflight_report(facts, settings)


def gpu_model_weights(config, params_b=None, dtype_bytes=None):
    try:
        return gpu_utils.estimate_weights(config or None, params_b or None, dtype_bytes or None)
    except (KeyError, ValueError, TypeError) as e:
        raise AnsibleFilterError("cannot estimate weights from the model config (missing/invalid %s); "
                                 "set gpu_preflight_model_params_b instead" % e)


class FilterModule(object):
    def filters(self):
        return {
            "gpu_preflight_report": gpu_preflight_report,
            "gpu_model_weights": gpu_model_weights,
        }
