# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The instance view: every per-instance value of vllm_service, computed,
checked and quoted in one place.

Who does what:

- ``vllm_args.py`` RENDERS: options as data -> argv -> quoted ExecStart line;
- ``vllm_flags/`` VALIDATES options: fictional flags, ranges, parallel
  sizes, shared GPUs (and, on the host, the installed vLLM's own parser);
- this file COMPOSES both: ``build_view(instances, settings)`` returns one
  dict per instance (paths, unit, URL, argv, ExecStart, GPUs, whether it has
  a key, ...) and raises ``InstanceViewError`` - naming the instance, the
  variable and the fix - for every input that must fail before any change.

The view never holds a secret: API keys and secret-named environment values
only decide booleans (``has_api_key``) and are checked for control
characters. The key value is read by exactly one template (instance.env.j2)
through ``instance_api_key``.

``settings`` (built once by the role in roles/vllm_service/vars/main.yml):
python, install_dir, home, config_dir, unit_dir, device (cpu/cuda),
common_args, common_env, cpu_kvcache_space_gib, api_key, api_keys,
default_gpu_memory_utilization, gpu_count, allow_public_bind,
allow_unauthenticated_public_bind, gateway, warmup (dict or None).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL_CHARS = vllm_args.CONTROL_CHARS
# The unit runs as an unprivileged user with no capabilities
# (CapabilityBoundingSet= empty): it cannot bind ports below 1024.
MIN_PORT = 1024
MAX_PORT = 65535
WILDCARDS = ("", "0.0.0.0", "::", "[::]", "*")
# Words that make a name a secret (split on "_", "-" and case).
SECRET_WORDS = frozenset(["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL",
                          "CREDENTIALS", "PRIVATE"])
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000

PUBLIC_WHY = (
    "vLLM 0.32 protects only /v1 with the API key: POST /invocations serves full completions, and "
    "/tokenize, /metrics, /load answer, without any key (measured on 0.32.0)")


class InstanceViewError(Exception):
    """An instance value that must not reach the host; the message names
    the instance, the variable and the fix (several problems, one a line)."""


def is_secret_name(name):
    """HF_TOKEN, AWS_SECRET_ACCESS_KEY, hf_token, db-password -> True."""
    words = re.split(r"[_\-.]+", str(name).upper())
    return any(w in SECRET_WORDS for w in words)


def is_loopback(host):
    h = str(host).strip("[]").lower()
    return h == "localhost" or h == "::1" or h.startswith("127.")


def is_wildcard(host):
    return str(host) in WILDCARDS


def probe_host(host):
    """Where the controller-side probes connect: loopback for wildcards."""
    if is_wildcard(host):
        return "127.0.0.1"
    return str(host).strip("[]")


def url_for(host, port):
    h = probe_host(host)
    if ":" in h:
        h = "[%s]" % h
    return "http://%s:%d" % (h, port)


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


def _as_list(value):
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def _int_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def parse_model_len(value):
    """``8192``, ``32k`` (x1000), ``32K`` (x1024), ``1m``/``1M`` -> int; -1/auto/None -> None."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if text in ("-1", "auto", ""):
        return None
    m = re.match(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$", text)
    if not m:
        raise ValueError(value)
    mult = {"": 1, "k": 1000, "K": 1024, "m": 1000 ** 2, "M": 1024 ** 2, "g": 1000 ** 3, "G": 1024 ** 3}
    return int(float(m.group(1)) * mult[m.group(2)])


def instance_api_key(name, api_key, api_keys):
    """The key of instance ``name``: vllm_api_keys[name] if listed (``""``
    turns it off), else vllm_api_key. Read only by instance.env.j2."""
    api_keys = api_keys or {}
    if name in api_keys:
        return "" if api_keys[name] is None else str(api_keys[name])
    return "" if api_key is None else str(api_key)


def instance_env(instance, settings):
    """The environment of one instance (common env, device variables, the
    instance's own env), without VLLM_API_KEY. May hold secrets: only the
    env template and the view's name list read it."""
    env = {}
    for k, v in (settings.get("common_env") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    if settings.get("device") == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.get("cpu_kvcache_space_gib", 1))
    gpus = instance.get("gpus")
    if isinstance(gpus, (list, tuple)):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    for k, v in (instance.get("env") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    multi = vllm_multinode.plan(instance, settings)
    for k, v in (multi["env"] if multi else {}).items():
        env.setdefault(k, v)  # VLLM_HOST_IP of this node, unless the instance sets it
    if env.get("VLLM_CPU_KVCACHE_SPACE") == "":
        # "" = let vLLM size the KV cache from gpu_memory_utilization; vLLM
        # itself fails on an empty value (int(''), measured on 0.32.0).
        del env["VLLM_CPU_KVCACHE_SPACE"]
    return env


def _label(index, inst):
    name = inst.get("name") if isinstance(inst, dict) else None
    return "instance %s (vllm_instances[%d])" % (name if name else "<no name>", index)


def _check_identity(index, inst, seen_names, seen_ports):
    """name, model, port, host, env keys, secret-named args."""
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
    port = _int_or_none(inst.get("port", DEFAULT_PORT))
    if port is None or not MIN_PORT <= port <= MAX_PORT:
        p.append("%s.port must be an integer in %d..%d (got %r): the unit runs as an unprivileged user without "
                 "capabilities, so it cannot bind ports below %d; put a proxy on a low port if you need one"
                 % (base, MIN_PORT, MAX_PORT, inst.get("port"), MIN_PORT))
    elif port in seen_ports:
        p.append("%s.port %d is also used by vllm_instances[%d]; give every instance its own port"
                 % (base, port, seen_ports[port]))
    else:
        seen_ports[port] = index
    host = inst.get("host", DEFAULT_HOST)
    if host is None or not isinstance(host, str):
        p.append("%s.host must be a string (an address or hostname; default 127.0.0.1), got %r" % (base, host))
    env = inst.get("env")
    if isinstance(env, dict):
        for key in env:
            if not ENV_KEY_RE.match(str(key)):
                p.append("%s.env: %r is not a valid environment variable name (letters, digits and '_', not "
                         "starting with a digit); rename it" % (base, key))
            elif str(key) == "VLLM_API_KEY":
                p.append("%s.env.VLLM_API_KEY: that would show the key in diffs and facts; use vllm_api_keys.%s "
                         "(or vllm_api_key), vaulted - the role writes it into the root-only env file"
                         % (base, name or "NAME"))
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
        if str(k) == "VLLM_API_KEY":
            p.append("vllm_common_env.VLLM_API_KEY: that would show the key in diffs and facts; use vllm_api_key "
                     "(or vllm_api_keys.NAME), vaulted - the role writes it into the root-only env file")
    for k, v in (settings.get("common_args") or {}).items():
        if is_secret_name(vllm_flags.normalize_key(k)) and vllm_flags.normalize_key(k) != "api_key":
            p.append("vllm_common_args.%s looks like a secret: options land in the drop-in (mode 0644) and in "
                     "`ps`; put it in vllm_common_env (for example HF_TOKEN, vaulted) or vllm_api_key" % k)
    p += _control_problems(settings.get("api_key") or "", "vllm_api_key", secret=True)
    for k, v in (settings.get("api_keys") or {}).items():
        p += _control_problems(v or "", "vllm_api_keys.%s" % k, secret=True)
    return p


def is_global_ip(host):
    """An IP literal that is routable on the internet (not private, loopback, link-local)."""
    try:
        return ipaddress.ip_address(str(host).strip("[]")).is_global
    except ValueError:
        return False


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


def _warmup_hook(python, settings, url, has_key):
    w = settings.get("warmup")
    if not w:
        return None
    hook = [python, "%s/bin/vllm-warmup.py" % settings.get("install_dir", "/opt/vllm"),
            "--url", url,
            "--wait-ready-timeout", str(w.get("wait_ready_timeout", 600)),
            "--prompt-lens", ",".join(str(n) for n in w.get("prompt_lens", [16, 64])),
            "--max-tokens", str(w.get("max_tokens", 16)),
            "--count", str(w.get("count", 8)),
            "--concurrency", str(w.get("concurrency", 2)), "--quiet"]
    if has_key:
        hook += ["--api-key-env", "VLLM_API_KEY"]
    return ("-" if w.get("ignore_errors") else "") + vllm_args.systemd_exec(hook)


def _one(index, inst, settings):
    multi = vllm_multinode.plan(inst, settings)
    if multi:
        inst = dict(inst, args=dict(inst.get("args") or {}, **multi["options"]))
    name = inst["name"]
    python = settings.get("python", "/opt/vllm/venv/bin/python")
    home = settings.get("home", "/var/lib/vllm")
    host = inst.get("host", DEFAULT_HOST)
    port = int(str(inst.get("port", DEFAULT_PORT)))
    served = _as_list(inst.get("served_model_name"))
    opts = vllm_flags.merged_options(inst, settings.get("common_args") or {})
    key, tp = vllm_flags.lookup(opts, "tensor_parallel_size", "tp")
    key, pp = vllm_flags.lookup(opts, "pipeline_parallel_size", "pp")
    key, gmu = vllm_flags.lookup(opts, "gpu_memory_utilization", "device_memory_utilization")
    key, mml = vllm_flags.lookup(opts, "max_model_len")
    has_key = len(instance_api_key(name, settings.get("api_key"), settings.get("api_keys"))) > 0
    public = not is_loopback(host)
    env = instance_env(inst, settings)
    secret_keys = sorted(k for k in env if is_secret_name(k))
    argv = vllm_args.instance_argv(inst, python, settings.get("common_args") or {})
    if multi and not multi["serves_http"]:
        argv = [python, "-c", vllm_multinode.HEADLESS_CODE] + argv[3:]
    url = url_for(host, port)
    gpus = inst.get("gpus")
    return {
        "name": name,
        "unit": "vllm@%s.service" % name,
        "dropin_path": "%s/vllm@%s.service.d/10-instance.conf" % (
            settings.get("unit_dir", "/etc/systemd/system"), name),
        "env_path": "%s/%s.env" % (settings.get("config_dir", "/etc/vllm"), name),
        "state_dir": "%s/%s" % (home, name),
        "cache_dir": "%s/%s/cache" % (home, name),
        "model": inst["model"],
        "served_model_name": served,
        "served_name": served[0] if served else inst["model"],
        "host": host,
        "probe_host": probe_host(host),
        "url": url,
        "port": port,
        "gpus": [int(g) for g in gpus] if isinstance(gpus, (list, tuple)) else None,
        "tensor_parallel_size": _int_or_none(tp) or 1,
        "pipeline_parallel_size": _int_or_none(pp) or 1,
        "gpu_memory_utilization": float(gmu) if gmu is not None else float(
            settings.get("default_gpu_memory_utilization", vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION)),
        "max_model_len": parse_model_len(mml) if mml is not None else None,
        "has_api_key": has_key,
        "public_bind": public,
        "public_without_key": public and not has_key,
        "argv": argv,
        "exec_start": vllm_args.systemd_exec(argv),
        "exec_start_post": _warmup_hook(python, settings, url, has_key),
        "secret_env_keys": secret_keys,
        "has_secrets": has_key or bool(secret_keys),
        "env": dict((k, v) for k, v in env.items() if k not in secret_keys),
        "readiness_timeout": _int_or_none(inst.get("readiness_timeout")),
        "device": settings.get("device", "cpu"),
        "python": python,
        # Multi-node (vllm_multinode.py): null / single-host defaults otherwise.
        "nodes": multi["nodes"] if multi else None,
        "distributed_mode": multi["distributed_mode"] if multi else None,
        "node_rank": multi["node_rank"] if multi else 0,
        "head_address": multi["head_address"] if multi else None,
        "serves_http": multi["serves_http"] if multi else True,
    }


def _bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def normalize_settings(settings):
    """Settings as templated by any ansible-core (2.16 may hand over strings)."""
    s = dict(settings or {})
    s["gpu_count"] = _int_or_none(s.get("gpu_count"))
    try:
        s["default_gpu_memory_utilization"] = float(s.get("default_gpu_memory_utilization",
                                                          vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION))
    except (TypeError, ValueError):
        s["default_gpu_memory_utilization"] = vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION
    for key in ("allow_public_bind", "allow_unauthenticated_public_bind", "gateway"):
        s[key] = _bool(s.get(key, False))
    if not isinstance(s.get("warmup"), dict):
        s["warmup"] = None
    else:
        s["warmup"] = dict(s["warmup"], ignore_errors=_bool(s["warmup"].get("ignore_errors", False)))
    return s


def check(instances, settings):
    """Every problem of the inventory's instances, as messages (empty = valid)."""
    settings = normalize_settings(settings)
    problems = []
    if not isinstance(instances, (list, tuple)) or not instances:
        return ["vllm_instances must be a non-empty list of instances ({name, model, ...})"]
    problems += _check_settings(settings)
    seen_names, seen_ports = {}, {}
    for i, inst in enumerate(instances):
        if not isinstance(inst, dict):
            problems.append("vllm_instances[%d] must be a dict with name and model, got %r" % (i, inst))
            continue
        own = _check_controls(i, inst, settings) + _check_identity(i, inst, seen_names, seen_ports)
        if not own:
            host = inst.get("host", DEFAULT_HOST)
            if not is_loopback(host):
                has_key = len(instance_api_key(inst["name"], settings.get("api_key"),
                                               settings.get("api_keys"))) > 0
                msg = _public_problem(i, inst, host, has_key, settings)
                if msg:
                    own.append(msg)
            key, mml = vllm_flags.lookup(vllm_flags.merged_options(inst, settings.get("common_args") or {}),
                                         "max_model_len")
            try:
                parse_model_len(mml)
            except ValueError:
                own.append("%s: max_model_len %r is not a length: write 8192, 32k (x1000), 32K (x1024) or -1/auto"
                           % (vllm_flags.option_source(i, inst, settings.get("common_args") or {}, key), mml))
        own += vllm_multinode.check(i, inst, settings)
        problems += ["%s: %s" % (_label(i, inst), m) for m in own]
    device = settings.get("device", "auto")
    flag_problems = (vllm_flags.check_fictional(instances, settings.get("common_args"), settings.get("common_env"),
                                                device)
                     + vllm_flags.check_ranges(instances, settings.get("common_args"), settings.get("gpu_count"),
                                               device, settings.get("default_gpu_memory_utilization",
                                                                    vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION)))
    names = dict(("vllm_instances[%d]" % i, inst.get("name")) for i, inst in enumerate(instances)
                 if isinstance(inst, dict))
    for prob in flag_problems:
        if prob["kind"] == "range" and prob["option"] == "--port":
            continue  # the port rules above say it with the instance name
        m = re.match(r"^(vllm_instances\[\d+\])", prob["path"] or "")
        if m and prob["option"] in vllm_multinode.SPANNED_OPTIONS and vllm_multinode.is_multinode(
                instances[int(m.group(1)[15:-1])]):
            continue  # sizes span the nodes: vllm_multinode checks GPUs per node x nodes
        who = "instance %s (%s)" % (names.get(m.group(1)), m.group(1)) if m else prob["path"]
        problems.append("%s: %s" % (who, prob["msg"]))
    return problems


def build_view(instances, settings):
    """One dict per instance (see the module docstring and docs/vllm_service.md).

    Raises InstanceViewError listing every problem when any input is invalid.
    """
    settings = normalize_settings(settings)
    problems = check(instances, settings)
    if problems:
        raise InstanceViewError("vllm_instances are invalid (nothing was changed):\n"
                                + "\n".join("- " + m for m in problems))
    return [_one(i, inst, settings) for i, inst in enumerate(instances)]
