# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The problem shape, variable paths and option lookup shared by the checks.

Every problem is a dict ``{"path": <variable path>, "option": <flag or key>,
"kind": <fictional|raw_key|reserved|type|range|port|parser|engine>, "msg": <text>}``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.knobs import COMMON_ARGS_VAR, INSTANCES_VAR


# The spelling rule lives with the argv rendering (merge_options uses it).
normalize_key = vllm_args.normalize_key


def problem(path, option, kind, msg):
    return {"path": path, "option": option, "kind": kind, "msg": msg}


def inst_path(index, *parts):
    path = "%s[%d]" % (INSTANCES_VAR, index)
    for part in parts:
        path += "." + str(part)
    return path


def option_source(instance_index, instance, common_args, key):
    """Variable path of an option after merging (the instance's args win)."""
    own = instance.get("args") or {}
    if isinstance(own, dict) and key in own:
        return inst_path(instance_index, "args", key)
    return "%s.%s" % (COMMON_ARGS_VAR, key)


def merged_options(instance, common_args):
    own = instance.get("args") or {}
    if not isinstance(own, dict):
        own = {}
    return vllm_args.merge_options(common_args if isinstance(common_args, dict) else {}, own)


def lookup(options, *names):
    """First non-None value among option aliases, with the key used."""
    for name in names:
        for key, value in options.items():
            if normalize_key(key) == name and value is not None:
                return key, value
    return None, None


def as_int(value):
    """An inventory integer (``8``, ``"8"``); ValueError for booleans and anything else."""
    if isinstance(value, bool):
        raise ValueError(value)
    return int(str(value))


def int_or_none(value, default=None):
    """``as_int``, or ``default`` where the value is not an integer (None, a boolean, text)."""
    try:
        return as_int(value)
    except ValueError:
        return default


def format_problems(problems):
    return "\n".join("- " + p["msg"] for p in problems)
