# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parse vLLM's Prometheus ``/metrics`` text and its startup log.

Pure functions (no Ansible import): used by ``vllm_kv_cache_info`` and
``vllm_health`` and by the unit tests on the real captures.

- :func:`parse_metrics` groups the ``vllm:*`` samples per ``(engine,
  model_name)``: capacity from the ``vllm:cache_config_info`` labels, usage
  from ``vllm:kv_cache_usage_perc`` (or the older ``vllm:gpu_cache_usage_perc``),
  requests running/waiting, preemptions, prefix-cache hit rate and token totals.
- :func:`parse_startup_log` reads ``GPU KV cache size: N tokens, Maximum
  concurrency for M tokens per request: Cx`` (or ``CPU KV cache size: ...``)
  from the log of the latest start, for servers run with ``--disable-log-stats``.
- :func:`parse_startup_facts` reads the engine's other start lines of the
  latest start: attention backend, FlashAttention version, weights memory,
  KV cache memory, torch.compile and CUDA graph figures (what a KV capacity
  prediction is compared with).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import re

try:
    from prometheus_client.parser import text_string_to_metric_families
    HAS_PROMETHEUS_CLIENT = True
    PROMETHEUS_CLIENT_IMPORT_ERROR = None
except ImportError as _e:  # pragma: no cover - depends on the interpreter
    HAS_PROMETHEUS_CLIENT = False
    PROMETHEUS_CLIENT_IMPORT_ERROR = _e

# cache_config_info labels returned as capacity keys, with their types.
CACHE_CONFIG_LABELS = {
    "kv_cache_size_tokens": int,
    "num_gpu_blocks": int,
    "num_cpu_blocks": int,
    "block_size": int,
    "cache_dtype": str,
    "kv_cache_max_concurrency": float,
    "gpu_memory_utilization": float,
    "enable_prefix_caching": bool,
    "kv_cache_memory_bytes": int,
    "calculate_kv_scales": bool,
    "sliding_window": int,
}

# usage key -> metric family names to try, newest first. The parser strips the
# counter suffix ``_total`` from family names.
USAGE_METRICS = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
    "num_preemptions": ("vllm:num_preemptions", "vllm:num_preemptions_total"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "prompt_tokens": ("vllm:prompt_tokens", "vllm:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens", "vllm:generation_tokens_total"),
}

INT_USAGE = ("num_requests_running", "num_requests_waiting", "num_preemptions",
             "prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens")

KV_LINE_RE = re.compile(
    r"(?P<device>GPU|CPU|XPU|TPU|NPU|HPU) KV cache size: (?P<tokens>[\d,]+) tokens"
    r"(?:, Maximum concurrency for (?P<per_req>[\d,]+) tokens per request: (?P<conc>[\d,.]+)x)?")
# vLLM 0.25.1 (CUDA) logs the concurrency on a line of its own, after the KV line.
CONCURRENCY_LINE_RE = re.compile(r"^(?:(?!KV cache size).)*Maximum concurrency for (?P<per_req>[\d,]+) tokens per request: "
                                 r"(?P<conc>[\d,.]+)x")
ENGINE_PREFIX_RE = re.compile(r"\((?P<proc>[A-Za-z]+)(?:_DP(?P<dp>\d+))?\s+pid=(?P<pid>\d+)\)")
START_MARKERS = ("non-default args:",)
ARGS_RE = re.compile(r"non-default args: (\{.*\})\s*$")
BANNER_MODEL_RE = re.compile(r"\bmodel\s{2,}(\S+)\s*$")


def strip_http_headers(text):
    """Drop an HTTP status line and headers (``curl -i`` style captures)."""
    if text.startswith("HTTP/") or text.startswith("GET ") or text.startswith("POST "):
        parts = re.split(r"\r?\n\r?\n", text, maxsplit=1)
        return parts[1] if len(parts) > 1 else ""
    return text


def _convert(value, kind):
    if value is None or value == "" or value == "None":
        return None
    try:
        if kind is bool:
            return str(value).lower() in ("true", "1", "yes")
        if kind is int:
            return int(float(value))
        if kind is float:
            return float(value)
    except ValueError:
        return value
    return value


def _key(labels):
    return (labels.get("engine", ""), labels.get("model_name", ""))


def _engine_sort_key(k):
    eng, model = k
    return (model, int(eng) if eng.isdigit() else 1 << 30, eng)


def parse_metrics(text):
    """Parse Prometheus text into a list of per-engine dicts.

    Returns a list (sorted by model, engine) of dicts with keys ``engine``,
    ``model_name``, ``capacity`` (dict), ``usage`` (dict) and
    ``usage_metric`` (which KV-usage family was found). An empty list means
    the text holds no ``vllm:`` metrics (for example ``--disable-log-stats``).
    """
    if not HAS_PROMETHEUS_CLIENT:
        raise ImportError("prometheus_client is required: %s" % PROMETHEUS_CLIENT_IMPORT_ERROR)
    text = strip_http_headers(text)
    samples = {}  # family name -> list of (labels, value)
    config = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        for s in family.samples:
            if family.name == "vllm:cache_config_info" and s.name.endswith("_info"):
                config[_key(s.labels)] = dict(s.labels)
                continue
            # Counters carry _total (value) and _created (timestamp) samples.
            if s.name.endswith("_created"):
                continue
            if family.type == "histogram":
                continue
            samples.setdefault(family.name, []).append((s.labels, s.value))
    engines = {}

    def entry(k):
        if k not in engines:
            engines[k] = {"engine": k[0], "model_name": k[1], "capacity": {}, "usage": {},
                          "usage_metric": None}
        return engines[k]

    for key, names in USAGE_METRICS.items():
        for name in names:
            if name not in samples:
                continue
            totals = {}
            for labels, value in samples[name]:
                # Sum label splits other than engine/model (there are none for these today).
                totals[_key(labels)] = totals.get(_key(labels), 0.0) + value
            for k, value in totals.items():
                e = entry(k)
                if key in e["usage"]:
                    continue
                e["usage"][key] = int(value) if key in INT_USAGE else value
                if key == "kv_cache_usage_perc":
                    e["usage_metric"] = name
            break
    # vLLM 0.32 labels cache_config_info with `engine` only (no model_name):
    # attach it to every entry of that engine; a model_name label, when
    # present, must match.
    for (eng, model), labels in config.items():
        targets = [e for (e_eng, e_model), e in engines.items()
                   if e_eng == eng and (not model or e_model == model)]
        if not targets:
            targets = [entry((eng, model))]
        for e in targets:
            for name, kind in CACHE_CONFIG_LABELS.items():
                value = _convert(labels.get(name), kind)
                if value is not None:
                    e["capacity"][name] = value
    for e in engines.values():
        u = e["usage"]
        q, h = u.get("prefix_cache_queries"), u.get("prefix_cache_hits")
        u["prefix_cache_hit_rate"] = (float(h) / q) if q else None
    return [engines[k] for k in sorted(engines, key=_engine_sort_key)]


def _served_name_from_args(line):
    m = ARGS_RE.search(line)
    if not m:
        return None, None
    try:
        args = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        sm = re.search(r"'served_model_name': \['([^']+)'", m.group(1))
        mm = re.search(r"'model': '([^']+)'", m.group(1))
        return (sm.group(1) if sm else None), (mm.group(1) if mm else None)
    served = args.get("served_model_name")
    if isinstance(served, (list, tuple)) and served:
        served = served[0]
    return served, args.get("model") or args.get("model_tag")


def parse_startup_log(text):
    """Parse the KV cache lines of the LATEST start in a vLLM log.

    Returns a list of per-engine dicts ``{engine, model_name, device,
    capacity: {kv_cache_size_tokens, kv_cache_max_concurrency,
    max_tokens_per_request}}``; empty when the log has no KV line.
    ``model_name`` is the first ``--served-model-name`` (else the model) read
    from the ``non-default args`` line; ``engine`` is the data-parallel rank
    from ``EngineCore_DP<N>`` (else the order of the lines).
    """
    lines = text.splitlines()
    start = 0
    for i, line in enumerate(lines):
        if any(m in line for m in START_MARKERS):
            start = i
    served, model = None, None
    for line in lines[start:]:
        if "non-default args:" in line:
            served, model = _served_name_from_args(line)
            break
    found = []
    for line in lines[start:]:
        m = KV_LINE_RE.search(line)
        if not m:
            c = CONCURRENCY_LINE_RE.search(line)
            if c and found and "kv_cache_max_concurrency" not in found[-1]["capacity"]:
                found[-1]["capacity"]["kv_cache_max_concurrency"] = float(c.group("conc").replace(",", ""))
                found[-1]["capacity"]["max_tokens_per_request"] = int(c.group("per_req").replace(",", ""))
            continue
        pm = ENGINE_PREFIX_RE.search(line)
        engine = pm.group("dp") if pm and pm.group("dp") is not None else None
        cap = {"kv_cache_size_tokens": int(m.group("tokens").replace(",", ""))}
        if m.group("conc"):
            cap["kv_cache_max_concurrency"] = float(m.group("conc").replace(",", ""))
            cap["max_tokens_per_request"] = int(m.group("per_req").replace(",", ""))
        found.append({"engine": engine, "model_name": served or model or "", "device": m.group("device"),
                      "capacity": cap, "usage": {}, "usage_metric": None})
    for i, e in enumerate(found):
        if e["engine"] is None:
            e["engine"] = str(i)
    return found


# key -> (regex, converters of its groups); first match of the latest start wins.
FACT_RES = {
    # 0.25.1: "Using AttentionBackendEnum.FLASH_ATTN backend."; older: "Using FLASH_ATTN attention backend"
    "attention_backend": (re.compile(r"Using (?:AttentionBackendEnum\.)?(?P<v>[A-Z][A-Z0-9_]+)(?: attention)? backend"),
                          str),
    "flash_attn_version": (re.compile(r"Using FlashAttention version (?P<v>\d+)"), int),
    "model_loading_gib": (re.compile(r"Model loading took (?P<v>[\d.]+) GiB"), float),
    "model_loading_s": (re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and (?P<v>[\d.]+) seconds"), float),
    "available_kv_cache_gib": (re.compile(r"Available KV cache memory: (?P<v>-?[\d.]+) GiB"), float),
    "torch_compile_s": (re.compile(r"torch\.compile (?:takes|took) (?P<v>[\d.]+) s in total"), float),
    "graph_capture_s": (re.compile(r"Graph capturing finished in (?P<v>[\d.]+) sec"), float),
    "graph_capture_gib": (re.compile(r"Graph capturing finished in [\d.]+ secs?, took (?P<v>-?[\d.]+) GiB"), float),
    "init_engine_s": (re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<v>[\d.]+) s"),
                      float),
    "vllm_version": (re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)"), str),
}


def parse_startup_facts(text):
    """Engine start figures of the LATEST start in a vLLM log (keys absent when not logged).

    ``attention_backend`` (``FLASH_ATTN``), ``flash_attn_version`` (3 on
    Hopper), ``model_loading_gib`` (weights in device memory),
    ``available_kv_cache_gib``, ``torch_compile_s``, ``graph_capture_s``,
    ``graph_capture_gib``, ``init_engine_s``, ``vllm_version``, plus
    ``kv_cache_size_tokens`` / ``device`` from the KV line.
    """
    lines = text.splitlines()
    start = 0
    for i, line in enumerate(lines):
        if any(m in line for m in START_MARKERS):
            start = i
    facts = {}
    for line in lines[start:]:
        for key, (rx, conv) in FACT_RES.items():
            if key not in facts:
                m = rx.search(line)
                if m:
                    facts[key] = conv(m.group("v"))
        if "kv_cache_size_tokens" not in facts:
            m = KV_LINE_RE.search(line)
            if m:
                facts["kv_cache_size_tokens"] = int(m.group("tokens").replace(",", ""))
                facts["device"] = m.group("device")
    return facts


def summarize_models(engines):
    """Aggregate per-engine entries per ``model_name``.

    Token capacity, requests, preemptions and token totals are summed over
    the engines; ``kv_cache_usage_perc`` is the maximum (the fullest engine);
    ``kv_cache_max_concurrency`` is summed (each engine serves its own share).
    """
    models = {}
    for e in engines:
        m = models.setdefault(e["model_name"], {"engines": [], "kv_cache_size_tokens": None,
                                                "kv_cache_max_concurrency": None,
                                                "kv_cache_usage_perc": None})
        m["engines"].append(e["engine"])
        cap, use = e.get("capacity", {}), e.get("usage", {})
        for k in ("kv_cache_size_tokens", "kv_cache_max_concurrency"):
            if cap.get(k) is not None:
                m[k] = (m[k] or 0) + cap[k]
        if use.get("kv_cache_usage_perc") is not None:
            m["kv_cache_usage_perc"] = max(m["kv_cache_usage_perc"] or 0.0, use["kv_cache_usage_perc"])
        for k in INT_USAGE:
            if use.get(k) is not None:
                m[k] = m.get(k, 0) + use[k]
        q, h = m.get("prefix_cache_queries"), m.get("prefix_cache_hits")
        m["prefix_cache_hit_rate"] = (float(h) / q) if q else None
    return models
