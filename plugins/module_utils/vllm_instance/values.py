# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""What the checks and the view share: the error, secret names, addresses
(loopback, wildcard, probe host, URL), value parsing (ints, lists, booleans,
``max_model_len``) and the settings as any ansible-core templates them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.llmops.serving.plugins.module_utils import model_source
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags

# Words that make a name a secret (split on "_", "-" and case).
SECRET_WORDS = frozenset(["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL",
                          "CREDENTIALS", "PRIVATE"])
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
WILDCARDS = ("", "0.0.0.0", "::", "[::]", "*")


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


def is_global_ip(host):
    """An IP literal that is routable on the internet (not private, loopback, link-local)."""
    try:
        return ipaddress.ip_address(str(host).strip("[]")).is_global
    except ValueError:
        return False


def as_list(value):
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


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


def to_bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def normalize_settings(settings):
    """Settings as templated by any ansible-core (2.16 may hand over strings)."""
    s = dict(settings or {})
    s["gpu_count"] = vllm_flags.int_or_none(s.get("gpu_count"))
    try:
        s["default_gpu_memory_utilization"] = float(s.get("default_gpu_memory_utilization",
                                                          vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION))
    except (TypeError, ValueError):
        s["default_gpu_memory_utilization"] = vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION
    for key in ("allow_public_bind", "allow_unauthenticated_public_bind", "gateway"):
        s[key] = to_bool(s.get(key, False))
    s["gpu_isolation"] = to_bool(s.get("gpu_isolation", True))
    if not isinstance(s.get("gpu_devices"), dict):
        s["gpu_devices"] = None
    # Where the models role puts each models_list entry (lora_adapters[].source names one).
    s["model_dests"] = model_source.dests(s.get("models") if isinstance(s.get("models"), list) else [],
                                          s.get("models_dir") or None)
    if not isinstance(s.get("warmup"), dict):
        s["warmup"] = None
    else:
        s["warmup"] = dict(s["warmup"], ignore_errors=to_bool(s["warmup"].get("ignore_errors", False)))
    return s
