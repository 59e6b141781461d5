# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the models role (declarations, supply plan, transfers, drift rows, SHA256SUMS)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import model_manifest as mm
from ansible_collections.llmops.serving.plugins.module_utils import model_source as ms


def _wrap(func, *args):
    try:
        return func(*args)
    except (ms.ModelSpecError, mm.ManifestError) as exc:
        raise AnsibleFilterError(str(exc))


def model_specs(models, models_dir):
    return _wrap(ms.validate, models, models_dir)


def model_plan(specs, fetched):
    return _wrap(ms.plan, specs, fetched)


def model_dirs(plan):
    return ms.dirs(plan)


def model_transfers(plan, copies):
    return ms.transfers(plan, copies)


def model_drift_rows(copies, plan, host):
    return ms.drift_rows(host, plan, copies)


def model_sha256sums(manifest):
    return _wrap(mm.to_sha256sums, manifest)


class FilterModule(object):
    def filters(self):
        return {
            "model_specs": model_specs,
            "model_plan": model_plan,
            "model_dirs": model_dirs,
            "model_transfers": model_transfers,
            "model_drift_rows": model_drift_rows,
            "model_sha256sums": model_sha256sums,
        }
