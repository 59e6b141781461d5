# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The token usage report of playbooks/usage.yml (issue 34 item 2).

Rows ``{"key", "model", "requests", "prompt", "completion"}`` (key: the key's
NAME, never the key) come from one of two sources:

- Prometheus (the monitoring role scrapes each gateway's usage counters, job
  ``gateway``): one instant vector per counter, ``sum by (key, model)
  (increase(COUNTER{job="gateway"}[PERIOD]))`` -> ``rows_from_prometheus``;
- the gateways' own counters (``gateway_metrics_port``), one exposition text per
  gateway host, summed -> ``rows_from_expositions``. Those count since each
  gateway's HAProxy started (a reload starts them at 0): no period.

``table`` formats the rows for the console.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

COUNTERS = (("requests", "llmops_gateway_usage_requests_total"),
            ("prompt", "llmops_gateway_prompt_tokens_total"),
            ("completion", "llmops_gateway_completion_tokens_total"))
_LINE = re.compile(r'^(\w+)\{key="((?:[^"\\]|\\.)*)",model="((?:[^"\\]|\\.)*)"\}\s+([0-9.eE+-]+)\s*$')


def _unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _add(rows, key, model, field, value):
    row = rows.setdefault((key, model), dict(key=key, model=model, requests=0, prompt=0, completion=0))
    row[field] += int(round(float(value)))


def _sorted(rows):
    return [rows[k] for k in sorted(rows)]


def rows_from_expositions(texts):
    """Rows summed over the exposition texts (one per gateway) of usage.lua's /metrics; an item may be the
    registered result of ansible.builtin.uri (its ``content``; skipped hosts have none)."""
    names = dict((metric, field) for field, metric in COUNTERS)
    rows = {}
    for text in texts or []:
        if isinstance(text, dict):
            text = text.get("content") or ""
        for line in str(text).splitlines():
            m = _LINE.match(line)
            if m and m.group(1) in names:
                _add(rows, _unescape(m.group(2)), _unescape(m.group(3)), names[m.group(1)], m.group(4))
    return _sorted(rows)


def prometheus_query(field, period):
    """The PromQL of one column over ``period`` (a Prometheus duration such as 24h or 7d)."""
    if not re.match(r"^[0-9]+[smhdwy]$", str(period)):
        raise ValueError("usage_period must be a Prometheus duration such as 1h, 24h or 7d, got %r" % (period,))
    metric = dict(COUNTERS)[field]
    return 'sum by (key, model) (increase(%s{job="gateway"}[%s]))' % (metric, period)


def rows_from_prometheus(results):
    """Rows from the registered results of ansible.builtin.uri looping over the columns (``item``: the column,
    ``json.data.result``: ``[{"metric": {"key", "model"}, "value": [ts, "N"]}, ...]``)."""
    rows = {}
    for res in results or []:
        field = res.get("item")
        if field not in dict(COUNTERS):
            continue
        for sample in ((res.get("json") or {}).get("data") or {}).get("result") or []:
            labels = sample.get("metric") or {}
            _add(rows, labels.get("key", ""), labels.get("model", ""), field, sample["value"][1])
    return _sorted(rows)


def table(rows, title):
    """The report: one line per key and model, then the totals; numbers right-aligned."""
    head = ("key", "model", "requests", "prompt tokens", "completion tokens", "total tokens")
    body = [(r["key"], r["model"], r["requests"], r["prompt"], r["completion"], r["prompt"] + r["completion"])
            for r in rows]
    total = ("total", "", sum(b[2] for b in body), sum(b[3] for b in body), sum(b[4] for b in body),
             sum(b[5] for b in body))
    cells = [head] + [tuple(str(c) for c in b) for b in body] + [tuple(str(c) for c in total)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]

    def fmt(c):
        return "  ".join(c[i].ljust(widths[i]) if i < 2 else c[i].rjust(widths[i]) for i in range(len(head))).rstrip()
    rule = "  ".join("-" * w for w in widths)
    lines = [title, fmt(cells[0]), rule] + [fmt(c) for c in cells[1:-1]]
    if not body:
        lines.append("(no usage counted)")
    return lines + [rule, fmt(cells[-1])]
