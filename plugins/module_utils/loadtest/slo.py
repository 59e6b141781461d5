# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""SLO targets: their keys, their check (``clean_slo``) and the verdict per level (``evaluate_slo``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.loadtest.report import fmt, render_slo_table
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.results import LoadTestError, num

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
        f = num(v)
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
                             target="%s %s" % (op, fmt(target, unit)), ok=ok, unit=unit))
    ok = all(r["ok"] for r in rows)
    return dict(ok=ok, rows=rows, table=render_slo_table(rows), targets=targets)
