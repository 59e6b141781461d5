# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Layer 1: options and environment variables that do not exist (any more) in
vLLM 0.32 - from the user seeds and older tutorials - each rejected with the
real replacement named; option keys given as raw flag strings; keys the role
renders itself (reserved).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.knobs import (
    COMMON_ARGS_VAR, COMMON_ENV_VAR, FICTIONAL_ENV, FICTIONAL_ENV_CPU, FICTIONAL_OPTIONS, FICTIONAL_OPTIONS_CPU,
    RESERVED_OPTIONS)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import inst_path, normalize_key, problem

_RAW_KEY = re.compile(r"^-|\s|=")


def _advice(norm, device):
    """The replacement text for a fictional option, fitting the host's device."""
    if device == "cpu" and norm in FICTIONAL_OPTIONS_CPU:
        return FICTIONAL_OPTIONS_CPU[norm]
    return FICTIONAL_OPTIONS[norm]


def _fictional_in_args(options, base_path, device="auto"):
    problems = []
    if options is None:
        return problems
    if not isinstance(options, dict):
        return [problem(base_path, None, "type",
                        "%s must be a dict of vLLM options (e.g. {max_model_len: 8192}), got %s"
                        % (base_path, type(options).__name__))]
    for key, value in options.items():
        path = "%s.%s" % (base_path, key)
        if _RAW_KEY.search(str(key)):
            problems.append(problem(
                path, str(key), "raw_key",
                "%s: option keys are data, not raw flags: write `%s: <value>` (snake_case, no "
                "leading dashes, no spaces or '='); booleans render --x / --no-x"
                % (path, normalize_key(str(key).split("=", 1)[0].split()[0] if str(key).strip() else key))))
            norm = normalize_key(str(key).split("=", 1)[0].split()[0]) if str(key).strip() else ""
            if norm in FICTIONAL_OPTIONS:
                problems.append(problem(path, norm, "fictional", "%s: %s" % (
                    path, _advice(norm, device).format(value=value))))
            continue
        norm = normalize_key(key)
        if norm in FICTIONAL_OPTIONS:
            problems.append(problem(path, vllm_args.option_flag(norm), "fictional", "%s: %s" % (
                path, _advice(norm, device).format(value=value if value is not None else "M"))))
        elif norm in RESERVED_OPTIONS:
            problems.append(problem(path, vllm_args.option_flag(norm), "reserved",
                                    "%s: %s" % (path, RESERVED_OPTIONS[norm])))
    return problems


def _fictional_in_env(env, base_path, device="auto"):
    problems = []
    table = FICTIONAL_ENV_CPU if device == "cpu" else FICTIONAL_ENV
    if env is None:
        return problems
    if not isinstance(env, dict):
        return [problem(base_path, None, "type", "%s must be a dict of environment variables, got %s"
                        % (base_path, type(env).__name__))]
    for key, value in env.items():
        if str(key) in table:
            path = "%s.%s" % (base_path, key)
            problems.append(problem(path, str(key), "fictional", "%s: %s" % (
                path, table[str(key)].format(value=value or "FLASH_ATTN"))))
    return problems


def check_fictional(instances, common_args=None, common_env=None, device="auto"):
    """Problems from fictional/removed options, raw flag keys and reserved keys.

    ``device`` (cpu/cuda/auto) picks advice that fits the host.
    """
    problems = []
    problems += _fictional_in_args(common_args, COMMON_ARGS_VAR, device)
    problems += _fictional_in_env(common_env, COMMON_ENV_VAR, device)
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            problems.append(problem(inst_path(i), None, "type", "%s must be a dict" % inst_path(i)))
            continue
        problems += _fictional_in_args(inst.get("args"), inst_path(i, "args"), device)
        problems += _fictional_in_env(inst.get("env"), inst_path(i, "env"), device)
        for key in inst:
            if normalize_key(key) in FICTIONAL_OPTIONS:
                path = inst_path(i, key)
                problems.append(problem(path, key, "fictional", "%s: %s (options go under `args`)" % (
                    path, _advice(normalize_key(key), device).format(value=inst[key]))))
    return problems


def checked_elsewhere(key):
    norm = normalize_key(key)
    return bool(_RAW_KEY.search(str(key))) or norm in FICTIONAL_OPTIONS or norm in RESERVED_OPTIONS
