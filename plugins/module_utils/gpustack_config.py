# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""GPUStack ``config.yaml`` keys: derive them from ``gpustack start --help``
and validate a config dict against them.

GPUStack reads its config file (``--config-file``) into a pydantic model whose
fields are the CLI flags in snake_case, and silently ignores keys it does not
know. This module lets the role reject unknown keys itself, name the real lever
for keys that only exist in blog posts, and check types/enums before a restart.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Flags of `gpustack start` that are not config keys.
NOT_CONFIG_KEYS = frozenset(["help", "config_file"])

# Types the help text does not say. Sources: the help text itself (ports,
# JSON/"specify the flag multiple times" options) and the real validation
# errors captured from gpustack 2.3.0 (gs-bad-config-enum.log: gateway_mode
# takes 'incluster' although the help says 'in-cluster').
TYPE_OVERRIDES = {
    "gateway_mode": {"type": "str", "choices": ["auto", "embedded", "incluster", "external", "disabled"]},
    "proxy_mode": {"type": "str", "choices": ["direct", "worker"]},
    "system_reserved": {"type": "dict", "keys": ["ram", "vram", "memory", "gpu_memory"]},
    "allow_origins": {"type": "list"},
    "allow_methods": {"type": "list"},
    "allow_headers": {"type": "list"},
    "trusted_hosts": {"type": "list"},
    "gateway_concurrency": {"type": "int"},
    "benchmark_max_duration_seconds": {"type": "int"},
    "saml_security": {"type": "str"},
    "service_port_range": {"type": "str", "pattern": r"^\d+-\d+$"},
    "ray_port_range": {"type": "str", "pattern": r"^\d+-\d+$"},
}

# Keys that the config file accepts but `start --help` does not list. `resources`
# (declared worker resources, e.g. fake GPUs) was seen working with 2.3.0
# (fixtures: gs-worker-config.yaml -> gs-workers-list.json).
CONFIG_ONLY_KEYS = {
    "resources": {"type": "dict"},
}

_REAL_MEMORY_LEVERS = (
    "GPUStack 2.3.0 has no such key. The real levers for static, deterministic GPU memory are: "
    "'--gpu-memory-utilization=<fraction>' in the model's backend_parameters "
    "(gpustack_models[].gpu_memory_utilization / the placement helper), "
    "gpu_selector {'gpu_ids': ['<worker>:cuda:<i>']} to pin a model to named GPUs, "
    "and system_reserved {'ram': GiB, 'vram': GiB} on each worker (gpustack_system_reserved)"
)

# Keys from the seeds (and similar posts) that do not exist, with the real lever.
FICTIONAL_KEYS = {
    "memory_overcommit": "'memory_overcommit': " + _REAL_MEMORY_LEVERS
    + ". GPUStack never over-commits: the scheduler reserves total VRAM x gpu-memory-utilization per GPU (default 0.9).",
    "memory_allocation_granularity": "'memory_allocation_granularity': " + _REAL_MEMORY_LEVERS
    + ". There is no allocation granularity: vLLM allocates its share once at start from --gpu-memory-utilization.",
    "resources.gpu.memory_utilization": "'resources.gpu.memory_utilization': " + _REAL_MEMORY_LEVERS
    + ". Set '--gpu-memory-utilization=<x>' in the model's backend_parameters instead.",
    "resources.gpu.memory_overcommit": "'resources.gpu.memory_overcommit': " + _REAL_MEMORY_LEVERS + ".",
    "startup_timeout": "'startup_timeout': GPUStack 2.3.0 has no such key; it probes the instance's HTTP GET /health "
    "(no gRPC health check) and keeps the instance 'starting' until that answers.",
    "health_check": "'health_check': GPUStack 2.3.0 has no such key; model instances are probed with HTTP GET /health.",
}

_OPT_RE = re.compile(r"^\s{2}(?:-\w(?: [A-Z][A-Z0-9_]*)?, )?--([a-z0-9][a-z0-9-]*)(?: ([A-Z][A-Z0-9_]*))?(?:\s|$)")


def parse_start_help(text):
    """Return ``{key: spec}`` for every option of ``gpustack start --help``.

    ``spec`` is ``{"type": "bool"|"int"|"str"|...}`` (+ ``choices``/``keys``/
    ``pattern``). A flag without a metavar is a boolean; a metavar ending in
    ``PORT`` is an int; overrides above refine the rest.
    """
    keys = {}
    in_options = False
    for line in text.splitlines():
        if line.strip().endswith(":") and not line.startswith(" "):
            # section headers: "options:", "Common settings:", ...
            in_options = True
            continue
        if not in_options:
            continue
        m = _OPT_RE.match(line)
        if not m:
            continue
        key = m.group(1).replace("-", "_")
        if key in NOT_CONFIG_KEYS:
            continue
        metavar = m.group(2)
        if metavar is None:
            spec = {"type": "bool"}
        elif metavar.endswith("PORT"):
            spec = {"type": "int"}
        else:
            spec = {"type": "str"}
        spec.update(TYPE_OVERRIDES.get(key, {}))
        keys[key] = spec
    return keys


def schema_from_help(text):
    """Keys from the help text plus the config-file-only keys."""
    schema = parse_start_help(text)
    for key, spec in CONFIG_ONLY_KEYS.items():
        schema.setdefault(key, dict(spec))
    return schema


def _flatten(prefix, value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flatten("%s.%s" % (prefix, k) if prefix else str(k), v)
    else:
        yield prefix, value


def _is_int(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.match(r"^-?\d+$", value.strip()) is not None


def _type_error(key, spec, value):
    kind = spec.get("type", "str")
    if value is None:
        return None
    if kind == "bool":
        if not isinstance(value, bool):
            return "%s must be a boolean (true/false), got %r" % (key, value)
    elif kind == "int":
        if not _is_int(value):
            return "%s must be an integer, got %r" % (key, value)
    elif kind == "list":
        if not isinstance(value, (list, str)):
            return "%s must be a list of strings, got %r" % (key, value)
    elif kind == "dict":
        if not isinstance(value, dict):
            return "%s must be a mapping, got %r" % (key, value)
        allowed = spec.get("keys")
        if allowed:
            for sub, subval in value.items():
                if sub not in allowed:
                    return "%s has unknown key %r (allowed: %s)" % (key, sub, ", ".join(allowed))
                if isinstance(subval, bool) or not isinstance(subval, (int, float)):
                    return "%s.%s must be a number of GiB, got %r" % (key, sub, subval)
                if subval < 0:
                    return "%s.%s must be >= 0, got %r" % (key, sub, subval)
    else:  # str
        if isinstance(value, (dict, list)):
            return "%s must be a string, got %r" % (key, value)
        choices = spec.get("choices")
        if choices and str(value) not in choices:
            hint = ""
            if key == "gateway_mode" and str(value) == "in-cluster":
                hint = " (the help text says 'in-cluster' but the real value is 'incluster')"
            where = ROLE_VARIABLES.get(key)
            if where:
                hint += "; set %s (or %s in gpustack_config / gpustack_server_config)" % (where, key)
            return "%s must be one of %s, got %r%s" % (key, ", ".join(choices), value, hint)
        pattern = spec.get("pattern")
        if pattern and not re.match(pattern, str(value)):
            return "%s must match %s, got %r" % (key, pattern, value)
    return None


# config.yaml keys the gpustack role sets from its own variables: an error
# about them names the variable to change.
ROLE_VARIABLES = {"gateway_mode": "gpustack_gateway_mode"}


def validate_config(config, schema):
    """Return a list of human readable errors (empty = valid).

    Unknown keys (top level, or a fictional dotted path such as
    ``resources.gpu.memory_utilization``) are errors; fictional ones name
    the real lever.
    """
    errors = []
    if config is None:
        return errors
    if not isinstance(config, dict):
        return ["gpustack_config must be a mapping of config.yaml keys, got %s" % type(config).__name__]
    # fictional dotted paths anywhere in the tree, and as literal dotted keys
    for path, _value in _flatten("", config):
        for fict, msg in FICTIONAL_KEYS.items():
            if path == fict or path.endswith("." + fict) and "." not in fict:
                errors.append(msg)
    seen_fictional = set()
    for key in config:
        skey = str(key)
        if skey in FICTIONAL_KEYS:
            seen_fictional.add(skey)
            continue
        if skey not in schema:
            if any(e.startswith("'%s" % skey) for e in errors):
                continue
            suggestion = ""
            if "-" in skey and skey.replace("-", "_") in schema:
                suggestion = " (use snake_case: %r)" % skey.replace("-", "_")
            errors.append(
                "unknown GPUStack config key %r%s: gpustack 2.3.0 silently ignores it. "
                "Allowed keys are the options of `gpustack start --help` in snake_case "
                "(gpustack_config_schema in roles/gpustack/vars)." % (skey, suggestion)
            )
            continue
        err = _type_error(skey, schema[skey], config[key])
        if err:
            errors.append(err)
    # de-duplicate, keep order
    out = []
    for e in errors:
        if e not in out:
            out.append(e)
    return out


def diff_schema(expected, actual):
    """Compare two key sets (stored vs installed CLI). Returns (missing, extra)."""
    exp = set(expected) - set(CONFIG_ONLY_KEYS)
    act = set(actual) - set(CONFIG_ONLY_KEYS)
    return sorted(exp - act), sorted(act - exp)
