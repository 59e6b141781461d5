# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Every rule an instance must pass before any host changes (``check``):
names, models, ports, hosts, env keys, control characters, secrets in argv,
public binds without a key or around the gateway, ``max_model_len``,
multi-node plans and the vllm_flags checks; each message names the instance,
the variable and the fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora
from ansible_collections.llmops.serving.plugins.module_utils import vllm_sleep
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.env import instance_api_key
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.values import (
    DEFAULT_HOST, is_global_ip, is_loopback, is_secret_name, is_wildcard,
    normalize_settings, parse_model_len)

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL_CHARS = vllm_args.CONTROL_CHARS

PUBLIC_WHY = (
    "vLLM 0.32 protects only /v1 with the API key: POST /invocations serves full completions, and "
    "/tokenize, /metrics, /load answer, without any key (measured on 0.32.0)")


def _walk(value, path, out=None):
    """[(path, string)] of every string in a nested value, keys included."""
    out = [] if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            sub = "%s.%s" % (path, k)
            out.append((sub + " (key)", str(k)))
            _walk(v, sub, out)
    elif isinstance(value, (list, tuple)):
        for n, v in enumerate(value):
            _walk(v, "%s[%d]" % (path, n), out)
    elif value is not None and not isinstance(value, (bool, int, float)):
        out.append((path, str(value)))
    return out


def _control_problems(value, path, secret=False):
    out = []
    for where, text in _walk(value, path):
        m = CONTROL_CHARS.search(text)
        if m:
            shown = "" if secret else " (%r)" % text[:60]
            out.append("%s contains the control character %r%s: systemd ends a unit line at CR/LF and "
                       "keeps multi-line environment values, so it would inject directives or break the "
                       "value; remove it" % (where, m.group(0), shown))
    return out


def _label(index, inst):
    name = inst.get("name") if isinstance(inst, dict) else None
    return "instance %s (vllm_instances[%d])" % (name if name else "<no name>", index)


def _check_identity(index, inst, seen_names):
    """name, model, host, env keys, secret-named args (the port: vllm_flags.check_ranges, the rule
    of module_utils/ports.py)."""
    p = []
    base = "vllm_instances[%d]" % index
    name = inst.get("name")
    if not name or not isinstance(name, str):
        p.append("%s.name is required (letters, digits, . _ -)" % base)
    elif name in (".", "..") or not NAME_RE.match(name):
        p.append("%s.name %r is not a valid instance name: use letters, digits, '.', '_' and '-' (not '.' or "
                 "'..', which would name the parent of the state directory)" % (base, name))
    elif name in seen_names:
        p.append("%s.name %r is also used by vllm_instances[%d]; give every instance its own name"
                 % (base, name, seen_names[name]))
    else:
        seen_names[name] = index
    if not inst.get("model") or not isinstance(inst.get("model"), str):
        p.append("%s.model is required: an absolute path on the host (or a hub id with HF_HUB_OFFLINE unset)"
                 % base)
    host = inst.get("host", DEFAULT_HOST)
    if host is None or not isinstance(host, str):
        p.append("%s.host must be a string (an address or hostname; default 127.0.0.1), got %r" % (base, host))
    env = inst.get("env")
    if isinstance(env, dict):
        for key in env:
            if not ENV_KEY_RE.match(str(key)):
                p.append("%s.env: %r is not a valid environment variable name (letters, digits and '_', not "
                         "starting with a digit); rename it" % (base, key))
            elif str(key) == vllm_env_file.API_KEY_ENV:
                p.append("%s.env.%s: that would show the key in diffs and facts; use vllm_api_keys.%s "
                         "(or vllm_api_key), vaulted - the role writes it into the root-only env file"
                         % (base, vllm_env_file.API_KEY_ENV, name or "NAME"))
    args = inst.get("args")
    if isinstance(args, dict):
        for key in args:
            if is_secret_name(vllm_flags.normalize_key(key)) and vllm_flags.normalize_key(key) != "api_key":
                p.append("%s.args.%s looks like a secret: options land in the unit's drop-in (mode 0644, "
                         "readable by every user) and in `ps`; put it in env (for example HF_TOKEN in "
                         "%s.env, vaulted) or, for the server's API key, in vllm_api_keys.%s"
                         % (base, key, base, name or "NAME"))
    return p


def _check_controls(index, inst, settings):
    base = "vllm_instances[%d]" % index
    p = []
    for key in ("name", "model", "served_model_name", "host", "port", "gpus"):
        if key in inst:
            p += _control_problems(inst[key], "%s.%s" % (base, key))
    args = inst.get("args")
    if isinstance(args, dict):
        for k, v in args.items():
            p += _control_problems({k: v}, "%s.args" % base, secret=is_secret_name(vllm_flags.normalize_key(k)))
    elif args is not None:
        p += _control_problems(args, "%s.args" % base)
    env = inst.get("env")
    if isinstance(env, dict):
        for k, v in env.items():
            p += _control_problems(str(k), "%s.env (key %s)" % (base, k))
            p += _control_problems(v, "%s.env.%s" % (base, k), secret=is_secret_name(k))
    return p


def _check_settings(settings):
    p = []
    p += _control_problems(settings.get("common_args") or {}, "vllm_common_args")
    for k, v in (settings.get("common_env") or {}).items():
        if not ENV_KEY_RE.match(str(k)):
            p.append("vllm_common_env: %r is not a valid environment variable name (letters, digits and '_', "
                     "not starting with a digit); rename it" % (k,))
        p += _control_problems(v, "vllm_common_env.%s" % k, secret=is_secret_name(k))
        if str(k) == vllm_env_file.API_KEY_ENV:
            p.append("vllm_common_env.%s: that would show the key in diffs and facts; use vllm_api_key "
                     "(or vllm_api_keys.NAME), vaulted - the role writes it into the root-only env file"
                     % vllm_env_file.API_KEY_ENV)
    for k, v in (settings.get("common_args") or {}).items():
        if is_secret_name(vllm_flags.normalize_key(k)) and vllm_flags.normalize_key(k) != "api_key":
            p.append("vllm_common_args.%s looks like a secret: options land in the drop-in (mode 0644) and in "
                     "`ps`; put it in vllm_common_env (for example HF_TOKEN, vaulted) or vllm_api_key" % k)
    p += _control_problems(settings.get("api_key") or "", "vllm_api_key", secret=True)
    for k, v in (settings.get("api_keys") or {}).items():
        p += _control_problems(v or "", "vllm_api_keys.%s" % k, secret=True)
    return p


def _public_problem(index, inst, host, has_key, settings):
    if settings.get("gateway"):
        # Behind a gateway: the private address it reaches, never a wildcard or public one
        # (clients would reach vLLM's unguarded endpoints around the gateway).
        if not (is_wildcard(host) or is_global_ip(host)):
            return None
        return ("vllm_instances[%d].host %r is %s while a gateway fronts the instances (gateway hosts in the "
                "inventory or vllm_gateway_fronted): clients could bypass the gateway's allowlist and keys (%s). "
                "Fix: bind 127.0.0.1 or the private address the gateway reaches (gateway_upstream_address for "
                "a loopback bind)."
                % (index, host, "a wildcard address" if is_wildcard(host) else "a public address", PUBLIC_WHY))
    if not has_key and settings.get("allow_unauthenticated_public_bind"):
        return None
    if has_key and (settings.get("allow_public_bind") or settings.get("allow_unauthenticated_public_bind")):
        return None
    what = "a wildcard address" if is_wildcard(host) else "a non-loopback address or hostname"
    if has_key:
        fix = ("bind 127.0.0.1 and put the gateway in front, or set vllm_allow_public_bind: true to accept "
               "the open endpoints")
    else:
        fix = ("set vllm_api_key (or vllm_api_keys.%s) from Ansible Vault AND vllm_allow_public_bind: true, "
               "bind 127.0.0.1 and put the gateway in front, or set vllm_allow_unauthenticated_public_bind: "
               "true to accept an open endpoint" % inst.get("name"))
    return ("vllm_instances[%d].host %r is %s%s: %s. Fix: %s."
            % (index, host, what, "" if has_key else " and the instance has no API key", PUBLIC_WHY, fix))


def check(instances, settings):
    """Every problem of the inventory's instances, as messages (empty = valid)."""
    settings = normalize_settings(settings)
    problems = []
    if not isinstance(instances, (list, tuple)) or not instances:
        return ["vllm_instances must be a non-empty list of instances ({name, model, ...})"]
    problems += _check_settings(settings)
    seen_names = {}
    running = list(instances)
    for i, inst in enumerate(instances):
        if not isinstance(inst, dict):
            problems.append("vllm_instances[%d] must be a dict with name and model, got %r" % (i, inst))
            continue
        own = _check_controls(i, inst, settings) + _check_identity(i, inst, seen_names)
        if not own:
            host = inst.get("host", DEFAULT_HOST)
            if not is_loopback(host):
                has_key = len(instance_api_key(inst["name"], settings.get("api_key"),
                                               settings.get("api_keys"))) > 0
                msg = _public_problem(i, inst, host, has_key, settings)
                if msg:
                    own.append(msg)
            own += vllm_sleep.check_instance(i, inst, settings, is_wildcard(host) or is_global_ip(host))
            own += vllm_lora.check(i, inst, settings["model_dests"])
            key, mml = vllm_flags.lookup(vllm_flags.merged_options(inst, settings.get("common_args") or {}),
                                         "max_model_len")
            try:
                parse_model_len(mml)
            except ValueError:
                own.append("%s: max_model_len %r is not a length: write 8192, 32k (x1000), 32K (x1024) or -1/auto"
                           % (vllm_flags.option_source(i, inst, settings.get("common_args") or {}, key), mml))
        multi = vllm_multinode.check(i, inst, settings)
        if not multi and vllm_multinode.is_multinode(inst):
            # The flag checks below see the instance as it runs (the backend the role sets).
            running[i] = vllm_multinode.running_instance(inst, vllm_multinode.plan(inst, settings)["options"])
        problems += ["%s: %s" % (_label(i, inst), m) for m in own + multi]
    device = settings.get("device", "auto")
    flag_problems = (vllm_flags.check_fictional(instances, settings.get("common_args"), settings.get("common_env"),
                                                device)
                     + vllm_flags.check_ranges(running, settings.get("common_args"), settings.get("gpu_count"),
                                               device, settings.get("default_gpu_memory_utilization",
                                                                    vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION)))
    names = dict(("vllm_instances[%d]" % i, inst.get("name")) for i, inst in enumerate(instances)
                 if isinstance(inst, dict))
    for prob in flag_problems:
        m = re.match(r"^(vllm_instances\[\d+\])", prob["path"] or "")
        who = "instance %s (%s)" % (names.get(m.group(1)), m.group(1)) if m else prob["path"]
        problems.append("%s: %s" % (who, prob["msg"]))
    return problems
