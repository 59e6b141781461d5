# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Markdown tables and the report of a load test (levels, SLO rows, summary).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def fmt(value, unit=""):
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


def render_slo_table(rows):
    lines = ["| concurrency | metric | measured | target | result |",
             "| ---: | --- | ---: | --- | --- |"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s |" % (
            "-" if r.get("concurrency") is None else r["concurrency"], r["metric"],
            fmt(r["measured"], r.get("unit", "")), r["target"], "ok" if r["ok"] else "FAIL"))
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
        lines.append("| " + " | ".join(fmt(lv.get(c[0])) for c in cols) + " |")
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
