# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Tuning sweeps: the best swept value for an objective, the sweep table, the plot input.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.loadtest.report import render_levels_table
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.results import LoadTestError, sort_levels

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
