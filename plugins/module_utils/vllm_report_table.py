# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report (playbooks/report.yml): one row per instance from the
vllm_report module's reads (:func:`report_rows`; :func:`not_installed_rows` on
a host without the vLLM venv), and the console table, one line per instance.

A value that is not there (None, empty, or the string ``None`` that a templated
fact can turn into) prints as ``-``: no column ever reads ``None``. Pure
Python, stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from datetime import datetime

COLUMNS = ("HOST", "INSTANCE", "STATE", "VERSION", "MODEL", "KV_TOKENS", "KV_PRED", "MAX_CONC", "USAGE",
           "READY_S", "FIRST_S", "TTFT_P50", "RESTARTS", "WATCHDOG", "LORA", "NODES_DOWN")
FORMAT = "%-16s %-10s %-8s %-8s %-10s %10s %10s %9s %7s %8s %8s %9s %-9s %-10s %-10s %s"
MISSING = "-"


def missing(value):
    return value is None or (isinstance(value, str) and value.strip() in ("", "None", "none", "null"))


def text(value):
    return MISSING if missing(value) else str(value)


def number(value, fmt):
    """``fmt % float(value)``; ``-`` when missing or not a number."""
    if missing(value) or isinstance(value, bool):
        return MISSING
    try:
        return fmt % float(value)
    except (TypeError, ValueError):
        return MISSING


def restarts_cell(restarts):
    """``N`` systemd restarts, `` LIMIT`` when the start limit was hit; ``-`` when unknown."""
    if not isinstance(restarts, dict) or missing(restarts.get("n_restarts")):
        return MISSING
    return str(restarts["n_restarts"]) + (" LIMIT" if restarts.get("start_limit_hit") is True else "")


def watchdog_cell(watchdog):
    """``STATUS N/h`` (restarts by the watchdog in the last hour), `` +Mrv`` when it revived the unit M times in
    the last hour after systemd gave up on it; ``-`` without a watchdog state."""
    if not isinstance(watchdog, dict) or watchdog.get("present") is False or missing(watchdog.get("status")):
        return MISSING
    per_hour = watchdog.get("restarts_last_hour")
    revived = watchdog.get("revivals_last_hour")
    return "%s %s/h%s" % (watchdog["status"], 0 if missing(per_hour) else per_hour,
                          " +%srv" % revived if not missing(revived) and revived else "")


def cause_lines(rows):
    """One line per instance the watchdog revived in the last hour or left failed: the journal's fatal line of its
    crash loop (the table has no room for it)."""
    out = []
    for row in rows or []:
        wd = (row or {}).get("watchdog")
        if not isinstance(wd, dict) or not (wd.get("revivals_last_hour") or wd.get("status") == "gave-up"):
            continue
        out.append("%s on %s: %s, revived %s times in the last hour (max %s)%s; cause: %s" % (
            text(row.get("instance")), text(row.get("host")), text(wd.get("status")), wd.get("revivals_last_hour") or 0,
            text(wd.get("max_revivals_per_hour")),
            ", next revival %s" % wd["next_revival"] if not missing(wd.get("next_revival")) else "",
            text(wd.get("last_failure_cause"))))
    return out


def row_cells(row):
    return (text(row.get("host")), text(row.get("instance")), text(row.get("state")), text(row.get("version")),
            text(row.get("model")), text(row.get("kv_cache_size_tokens")), text(row.get("kv_cache_predicted_tokens")),
            number(row.get("kv_cache_max_concurrency"), "%.1fx"),
            number(None if missing(row.get("kv_cache_usage_perc")) else _times100(row.get("kv_cache_usage_perc")), "%.1f%%"),
            number(row.get("ready_after_s"), "%.1f"), number(row.get("first_request_s"), "%.3f"),
            number(row.get("warm_ttft_p50_s"), "%.3fs"), restarts_cell(row.get("restarts")),
            watchdog_cell(row.get("watchdog")), ",".join(row.get("lora_adapters") or []) or MISSING,
            nodes_cell(row.get("nodes_down")))


def nodes_cell(nodes):
    """The nodes whose part of a spanning instance is down, comma-separated; ``-`` when none."""
    if not isinstance(nodes, (list, tuple)):
        return text(nodes)
    return ",".join(str(n) for n in nodes) or MISSING


def _times100(value):
    try:
        return float(value) * 100
    except (TypeError, ValueError):
        return None


def table_lines(rows):
    """The header and one line per row (list of str), then the crash loops' causes (:func:`cause_lines`)."""
    return [FORMAT % COLUMNS] + [FORMAT % row_cells(r or {}) for r in rows or []] + cause_lines(rows)


# systemd's timestamps as `systemctl show` prints them (ActiveEnterTimestamp, ExecMainStartTimestamp).
SYSTEMD_TIME = "%a %Y-%m-%d %H:%M:%S %Z"


def ready_after_s(unit):
    """Seconds from the unit's last start to active (engine load + warmup hook); None without both timestamps."""
    unit = unit or {}
    active, started = unit.get("active_enter_timestamp"), unit.get("exec_main_start_timestamp")
    if not active or not started:
        return None
    return (datetime.strptime(active, SYSTEMD_TIME) - datetime.strptime(started, SYSTEMD_TIME)).total_seconds()


def _model_kv(kv, model):
    """The KV read of the served model, else of the first model read, else {}."""
    models = kv.get("models") or {}
    if not models:
        return {}
    return models[model] if model in models else next(iter(models.values()), {})


def report_row(host, read, ready=None, nodes_health=None):
    """The report row of one instance from its vllm_report read. ``ready``: vllm_service's readiness results of
    this run (vllm_ready: the gate timed the first request after a restart); ``nodes_health``: ray_cluster's
    vllm_nodes_health (the nodes whose part of a spanning instance is down)."""
    name = read.get("name")
    health, kv, warm = read.get("health") or {}, read.get("kv") or {}, read.get("warmup") or {}
    model_kv = _model_kv(kv, health.get("model"))
    predicted = (read.get("predicted") or {}).get("kv")
    ready = ready or {}
    if name in ready:
        first = ready[name]["readiness"]["latency_s"]
    else:
        first = (warm.get("cold") or {}).get("e2e_s")
    return {
        "host": host, "instance": name, "url": health.get("url"), "state": health.get("state"),
        "reason": health.get("reason"), "version": health.get("version"), "model": health.get("model"),
        "max_model_len": health.get("max_model_len"), "unit": health.get("unit"),
        "kv_source": kv.get("source", "none"),
        "kv_cache_size_tokens": model_kv.get("kv_cache_size_tokens"),
        "kv_cache_predicted_tokens": predicted.get("tokens") if predicted else None,
        "kv_cache_prediction_exact": predicted.get("exact") if predicted else None,
        "restarts": health.get("restarts", {}), "watchdog": health.get("watchdog", {}),
        "kv_cache_max_concurrency": model_kv.get("kv_cache_max_concurrency"),
        "kv_cache_usage_perc": model_kv.get("kv_cache_usage_perc"),
        "kv_engines": kv.get("engines", []),
        "warm_ttft_p50_s": (warm.get("warm") or {}).get("ttft_p50_s"),
        "ready_after_s": ready_after_s(health.get("unit")),
        "first_request_s": first,
        "warmup": dict((k, v) for k, v in warm.items() if k != "changed"),
        "nodes_down": ((nodes_health or {}).get(name) or {}).get("missing", []),
        # The LoRA adapters the instance serves now (/v1/models entries with a parent).
        "lora_adapters": [m["id"] for m in health.get("models") or [] if isinstance(m, dict) and m.get("parent")],
    }


def report_rows(host, reads, ready=None, nodes_health=None):
    """:func:`report_row` of each read, in order."""
    return [report_row(host, r, ready, nodes_health) for r in reads or []]


def not_installed_rows(host, view, python):
    """One row per instance of the view on a host without the vLLM venv (``python`` does not exist)."""
    return [{
        "host": host, "instance": i.get("name"), "url": i.get("url"), "state": "not-installed",
        "reason": "%s does not exist (vLLM is not installed on this host yet)" % python,
        "version": None, "model": i.get("served_name"), "max_model_len": None, "unit": {}, "kv_source": "none",
        "kv_cache_size_tokens": None, "kv_cache_predicted_tokens": None, "kv_cache_prediction_exact": None,
        "restarts": {}, "watchdog": {}, "kv_cache_max_concurrency": None, "kv_cache_usage_perc": None,
        "kv_engines": [], "warm_ttft_p50_s": None, "ready_after_s": None, "first_request_s": None, "warmup": {},
        "nodes_down": [],
    } for i in view or []]
