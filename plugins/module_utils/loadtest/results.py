# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parse load-test results (EvalScope 1.14.1 perf, vLLM 0.32 ``vllm bench serve``)
into one normalized record per concurrency level.

Normalized level (all latencies in milliseconds, ``None`` when the tool did
not report the figure)::

    tool, concurrency, requests, completed, failed, duration_s,
    request_throughput, output_throughput, total_token_throughput,
    ttft_mean_ms, ttft_p50_ms, ttft_p99_ms,
    tpot_mean_ms, tpot_p99_ms, itl_mean_ms, itl_p99_ms,
    e2el_mean_ms, e2el_p99_ms, source
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

TOOLS = ("evalscope", "vllm_bench")

LEVEL_KEYS = (
    "tool", "concurrency", "requests", "completed", "failed", "duration_s",
    "request_throughput", "output_throughput", "total_token_throughput",
    "ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms",
    "tpot_mean_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p99_ms",
    "e2el_mean_ms", "e2el_p99_ms", "source",
)

EVALSCOPE_DIR_RE = re.compile(r"^parallel_(\d+)_number_(\d+)$")


class LoadTestError(ValueError):
    """A result file is missing or not in the expected format."""


def num(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value):
    f = num(value)
    return None if f is None else int(round(f))


def _empty_level(tool):
    return dict((k, None) for k in LEVEL_KEYS if k != "tool") | {"tool": tool}


def _percentile_row(percentiles, label):
    for row in percentiles or []:
        if str(row.get("Percentiles", "")).strip() == label:
            return row
    return {}


def normalize_evalscope(summary, percentiles, source=None):
    """One EvalScope ``parallel_P_number_N`` folder -> normalized level.

    ``summary``: ``benchmark_summary.json`` (dict), ``percentiles``:
    ``benchmark_percentile.json`` (list of rows ``min, 1%, ..., 99%, max``).
    """
    if not isinstance(summary, dict) or "Concurrency" not in summary:
        raise LoadTestError("not an EvalScope benchmark_summary.json (no 'Concurrency' key)%s"
                            % (": %s" % source if source else ""))
    p50 = _percentile_row(percentiles, "50%")
    p99 = _percentile_row(percentiles, "99%")
    level = _empty_level("evalscope")
    lat99 = num(p99.get("Latency (s)"))
    avg_lat = num(summary.get("Avg Latency (s)"))
    level.update(
        concurrency=_int(summary.get("Concurrency")),
        requests=_int(summary.get("Total Requests")),
        completed=_int(summary.get("Success Requests")),
        failed=_int(summary.get("Failed Requests")),
        duration_s=num(summary.get("Test Duration (s)")),
        request_throughput=num(summary.get("Req Throughput (req/s)")),
        output_throughput=num(summary.get("Output Throughput (tok/s)")),
        total_token_throughput=num(summary.get("Total Throughput (tok/s)")),
        ttft_mean_ms=num(summary.get("Avg TTFT (ms)")),
        ttft_p50_ms=num(p50.get("TTFT (ms)")),
        ttft_p99_ms=num(p99.get("TTFT (ms)")),
        tpot_mean_ms=num(summary.get("Avg TPOT (ms)")),
        tpot_p99_ms=num(p99.get("TPOT (ms)")),
        itl_mean_ms=num(summary.get("Avg ITL (ms)")),
        itl_p99_ms=num(p99.get("ITL (ms)")),
        e2el_mean_ms=None if avg_lat is None else avg_lat * 1000.0,
        e2el_p99_ms=None if lat99 is None else lat99 * 1000.0,
        source=source,
    )
    return level


def find_evalscope_dirs(root):
    """All ``parallel_P_number_N`` folders under ``root`` (any depth)."""
    found = []
    for dirpath, dirnames, _files in os.walk(root):
        for d in dirnames:
            if EVALSCOPE_DIR_RE.match(d):
                found.append(os.path.join(dirpath, d))
    return sorted(found)


def _read_json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, IOError) as e:
        raise LoadTestError("cannot read %s: %s" % (path, e))
    except ValueError as e:
        raise LoadTestError("%s is not valid JSON: %s" % (path, e))


def load_evalscope(root):
    levels = []
    for d in find_evalscope_dirs(root):
        summary_path = os.path.join(d, "benchmark_summary.json")
        if not os.path.exists(summary_path):
            # EvalScope writes no summary when every request failed before
            # any metric existed: report the level as fully failed.
            m = EVALSCOPE_DIR_RE.match(os.path.basename(d))
            level = _empty_level("evalscope")
            level.update(concurrency=int(m.group(1)), requests=int(m.group(2)),
                         completed=0, failed=int(m.group(2)), source=d)
            levels.append(level)
            continue
        pct_path = os.path.join(d, "benchmark_percentile.json")
        pct = _read_json(pct_path) if os.path.exists(pct_path) else []
        levels.append(normalize_evalscope(_read_json(summary_path), pct, source=summary_path))
    return sort_levels(levels)


def normalize_vllm_bench(result, source=None):
    """One ``vllm bench serve --save-result`` JSON -> normalized level."""
    if not isinstance(result, dict) or "completed" not in result or "request_throughput" not in result:
        raise LoadTestError("not a vllm bench serve result (no 'completed'/'request_throughput')%s"
                            % (": %s" % source if source else ""))
    completed = _int(result.get("completed")) or 0
    failed = _int(result.get("failed"))
    if failed is None:
        failed = max(0, (_int(result.get("num_prompts")) or completed) - completed)
    concurrency = _int(result.get("max_concurrency"))
    level = _empty_level("vllm_bench")

    def ms(key):
        # vllm bench writes 0.0 for every latency when no request succeeded.
        return num(result.get(key)) if completed > 0 else None

    level.update(
        concurrency=concurrency,
        requests=_int(result.get("num_prompts")) if result.get("num_prompts") is not None else completed + failed,
        completed=completed,
        failed=failed,
        duration_s=num(result.get("duration")),
        request_throughput=num(result.get("request_throughput")),
        output_throughput=num(result.get("output_throughput")),
        total_token_throughput=num(result.get("total_token_throughput")),
        ttft_mean_ms=ms("mean_ttft_ms"),
        ttft_p50_ms=ms("p50_ttft_ms") if result.get("p50_ttft_ms") is not None else ms("median_ttft_ms"),
        ttft_p99_ms=ms("p99_ttft_ms"),
        tpot_mean_ms=ms("mean_tpot_ms"),
        tpot_p99_ms=ms("p99_tpot_ms"),
        itl_mean_ms=ms("mean_itl_ms"),
        itl_p99_ms=ms("p99_itl_ms"),
        e2el_mean_ms=ms("mean_e2el_ms"),
        e2el_p99_ms=ms("p99_e2el_ms"),
        source=source,
    )
    return level


def load_vllm_bench(root):
    levels = []
    names = sorted(n for n in os.listdir(root) if n.endswith(".json")) if os.path.isdir(root) else []
    for name in names:
        path = os.path.join(root, name)
        data = _read_json(path)
        if isinstance(data, dict) and "request_throughput" in data:
            levels.append(normalize_vllm_bench(data, source=path))
    return sort_levels(levels)


def load_results(tool, root):
    """Normalized levels for ``tool`` from the result folder ``root``."""
    if tool not in TOOLS:
        raise LoadTestError("tool must be one of %s, got %r" % (", ".join(TOOLS), tool))
    if not os.path.isdir(root):
        return []
    return load_evalscope(root) if tool == "evalscope" else load_vllm_bench(root)


def sort_levels(levels):
    return sorted(levels, key=lambda lv: (lv.get("concurrency") is None, lv.get("concurrency") or 0))
