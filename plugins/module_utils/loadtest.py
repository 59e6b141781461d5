# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parse load-test results (EvalScope 1.14.1 perf, vLLM 0.32 ``vllm bench serve``)
into one normalized record per concurrency level, and evaluate SLOs.

Pure functions (stdlib only): used by the ``loadtest_results`` module on the
load-generator host and by the ``loadtest_*`` filters on the controller.

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

# SLO keys -> (level key, comparison, label, unit)
SLO_SPEC = (
    ("max_failed", "failed", "<=", "failed requests", ""),
    ("p99_ttft_ms", "ttft_p99_ms", "<=", "p99 TTFT", "ms"),
    ("p99_tpot_ms", "tpot_p99_ms", "<=", "p99 TPOT", "ms"),
    ("p99_itl_ms", "itl_p99_ms", "<=", "p99 ITL", "ms"),
    ("p99_e2el_ms", "e2el_p99_ms", "<=", "p99 end-to-end latency", "ms"),
    ("min_output_throughput", "output_throughput", ">=", "output throughput", "tok/s"),
)
SLO_KEYS = tuple(s[0] for s in SLO_SPEC)


class LoadTestError(ValueError):
    """A result file is missing or not in the expected format."""


def _num(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value):
    f = _num(value)
    return None if f is None else int(round(f))


def _empty_level(tool):
    return dict((k, None) for k in LEVEL_KEYS if k != "tool") | {"tool": tool}


# --------------------------------------------------------------------- EvalScope
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
    lat99 = _num(p99.get("Latency (s)"))
    avg_lat = _num(summary.get("Avg Latency (s)"))
    level.update(
        concurrency=_int(summary.get("Concurrency")),
        requests=_int(summary.get("Total Requests")),
        completed=_int(summary.get("Success Requests")),
        failed=_int(summary.get("Failed Requests")),
        duration_s=_num(summary.get("Test Duration (s)")),
        request_throughput=_num(summary.get("Req Throughput (req/s)")),
        output_throughput=_num(summary.get("Output Throughput (tok/s)")),
        total_token_throughput=_num(summary.get("Total Throughput (tok/s)")),
        ttft_mean_ms=_num(summary.get("Avg TTFT (ms)")),
        ttft_p50_ms=_num(p50.get("TTFT (ms)")),
        ttft_p99_ms=_num(p99.get("TTFT (ms)")),
        tpot_mean_ms=_num(summary.get("Avg TPOT (ms)")),
        tpot_p99_ms=_num(p99.get("TPOT (ms)")),
        itl_mean_ms=_num(summary.get("Avg ITL (ms)")),
        itl_p99_ms=_num(p99.get("ITL (ms)")),
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


# ---------------------------------------------------------------- vllm bench
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
        return _num(result.get(key)) if completed > 0 else None

    level.update(
        concurrency=concurrency,
        requests=_int(result.get("num_prompts")) if result.get("num_prompts") is not None else completed + failed,
        completed=completed,
        failed=failed,
        duration_s=_num(result.get("duration")),
        request_throughput=_num(result.get("request_throughput")),
        output_throughput=_num(result.get("output_throughput")),
        total_token_throughput=_num(result.get("total_token_throughput")),
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


# ----------------------------------------------------------------------- SLOs
def _fmt(value, unit=""):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e12 and unit == "":
            text = "%d" % value
        else:
            text = "%.2f" % value
    else:
        text = str(value)
    return "%s %s" % (text, unit) if unit else text


def clean_slo(slo):
    """Drop unset targets; reject unknown keys (named, with the valid ones)."""
    slo = dict(slo or {})
    unknown = sorted(k for k in slo if k not in SLO_KEYS)
    if unknown:
        raise LoadTestError("unknown SLO key(s) %s; valid keys: %s" % (", ".join(unknown), ", ".join(SLO_KEYS)))
    out = {}
    for k, v in slo.items():
        if v is None or v == "":
            continue
        f = _num(v)
        if f is None or f < 0:
            raise LoadTestError("SLO %s must be a number >= 0, got %r" % (k, v))
        out[k] = f
    return out


def evaluate_slo(levels, slo):
    """Check every level against ``slo``.

    Returns ``dict(ok, rows, table)``; a row is ``dict(concurrency, metric,
    measured, target, ok)``. A level with no successful request always fails
    (row ``successful requests``), whatever the targets; so does an empty
    result set.
    """
    targets = clean_slo(slo)
    rows = []
    if not levels:
        rows.append(dict(concurrency=None, metric="results", measured=None, target="at least one level", ok=False))
    for lv in levels:
        conc = lv.get("concurrency")
        if not lv.get("completed"):
            rows.append(dict(concurrency=conc, metric="successful requests", measured=lv.get("completed") or 0,
                             target=">= 1", ok=False))
        for key, field, op, label, unit in SLO_SPEC:
            if key not in targets:
                continue
            target = targets[key]
            measured = lv.get(field)
            if measured is None:
                ok = False
            elif op == "<=":
                ok = measured <= target
            else:
                ok = measured >= target
            rows.append(dict(concurrency=conc, metric=label, measured=measured,
                             target="%s %s" % (op, _fmt(target, unit)), ok=ok, unit=unit))
    ok = all(r["ok"] for r in rows)
    return dict(ok=ok, rows=rows, table=render_slo_table(rows), targets=targets)


def render_slo_table(rows):
    lines = ["| concurrency | metric | measured | target | result |",
             "| ---: | --- | ---: | --- | --- |"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s |" % (
            "-" if r.get("concurrency") is None else r["concurrency"], r["metric"],
            _fmt(r["measured"], r.get("unit", "")), r["target"], "ok" if r["ok"] else "FAIL"))
    return "\n".join(lines)


LEVEL_COLUMNS = (
    ("concurrency", "conc."), ("requests", "requests"), ("failed", "failed"),
    ("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
    ("ttft_mean_ms", "TTFT mean ms"), ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"),
    ("tpot_p99_ms", "TPOT p99 ms"), ("itl_p99_ms", "ITL p99 ms"), ("e2el_p99_ms", "E2E p99 ms"),
)


def render_levels_table(levels, first=None):
    cols = list(LEVEL_COLUMNS)
    if first:
        cols.insert(0, first)
    lines = ["| " + " | ".join(c[1] for c in cols) + " |",
             "|" + "|".join(" ---: " for _c in cols) + "|"]
    for lv in levels:
        lines.append("| " + " | ".join(_fmt(lv.get(c[0])) for c in cols) + " |")
    return "\n".join(lines)


def render_summary(levels, verdict, meta=None):
    """Markdown report: run facts, per-level table, SLO table."""
    meta = dict(meta or {})
    out = ["# Load test report", ""]
    for key in sorted(meta):
        if meta[key] not in (None, "", [], {}):
            out.append("- **%s**: %s" % (key, meta[key]))
    if meta:
        out.append("")
    out += ["## Results per concurrency level", "", render_levels_table(levels) if levels else "_no results_", ""]
    out += ["## SLO: %s" % ("PASS" if verdict["ok"] else "FAIL"), ""]
    if verdict["rows"]:
        out.append(verdict["table"])
    else:
        out.append("_no SLO targets set_")
    out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------- tuning
OBJECTIVES = {
    "output_throughput": ("output_throughput", "max"),
    "ttft_p99_ms": ("ttft_p99_ms", "min"),
}


def pick_level(levels, concurrency=None):
    """The level at ``concurrency`` (default: the highest measured)."""
    levels = [lv for lv in levels if lv.get("concurrency") is not None]
    if not levels:
        return None
    if concurrency is None:
        return max(levels, key=lambda lv: lv["concurrency"])
    for lv in levels:
        if int(lv["concurrency"]) == int(concurrency):
            return lv
    return None


def best_value(sweep, objective="output_throughput", concurrency=None):
    """Pick the best swept value.

    ``sweep``: list of ``dict(value, levels)``. A value whose chosen level
    has failed requests or no figure is never best. Returns ``dict(value,
    metric, measured, objective, concurrency, candidates)`` or ``value=None``
    when nothing qualified.
    """
    if objective not in OBJECTIVES:
        raise LoadTestError("objective must be one of %s, got %r" % (", ".join(sorted(OBJECTIVES)), objective))
    field, direction = OBJECTIVES[objective]
    candidates = []
    for entry in sweep:
        lv = pick_level(entry.get("levels") or [], concurrency)
        measured = lv.get(field) if lv else None
        valid = bool(lv) and measured is not None and not lv.get("failed") and bool(lv.get("completed"))
        candidates.append(dict(value=entry.get("value"), measured=measured, valid=valid,
                               concurrency=lv.get("concurrency") if lv else None))
    good = [c for c in candidates if c["valid"]]
    best = None
    if good:
        best = (max if direction == "max" else min)(good, key=lambda c: c["measured"])
    return dict(value=best["value"] if best else None, measured=best["measured"] if best else None,
                concurrency=best["concurrency"] if best else concurrency, metric=field,
                objective=objective, direction=direction, candidates=candidates)


def render_sweep_table(option, sweep):
    rows = []
    for entry in sweep:
        for lv in entry.get("levels") or []:
            rows.append(dict(lv, value=entry.get("value")))
    return render_levels_table(rows, first=("value", option))


# ------------------------------------------------------------------- plots
def plot_data(title, levels=None, sweep=None, option=None, label=None):
    """Input for roles/verify/files/plot_loadtest.py.

    Verify: ``levels`` -> one series, x = concurrency. Sweep: ``sweep`` (list
    of ``dict(value, levels)``) and ``option`` -> one series per concurrency,
    x = the swept value.
    """
    series = []
    if sweep is None:
        pts = [dict(x=lv.get("concurrency"), output_throughput=lv.get("output_throughput"),
                    ttft_p99_ms=lv.get("ttft_p99_ms")) for lv in sort_levels(levels or [])]
        series.append(dict(label=label or "results", points=pts))
        x_label = "concurrency"
    else:
        concs = sorted(set(lv.get("concurrency") for e in sweep for lv in (e.get("levels") or [])
                           if lv.get("concurrency") is not None))
        for c in concs:
            pts = []
            for e in sweep:
                lv = pick_level(e.get("levels") or [], c)
                pts.append(dict(x=e.get("value"), output_throughput=lv.get("output_throughput") if lv else None,
                                ttft_p99_ms=lv.get("ttft_p99_ms") if lv else None))
            series.append(dict(label="concurrency %s" % c, points=pts))
        x_label = option or "value"
    return dict(title=title, x_label=x_label, series=series)
