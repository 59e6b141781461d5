# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The KV cache of a running vLLM instance: ``/metrics`` (capacity and usage per
engine and model), else the startup line in the unit's journal. ``vllm_kv_cache_info``
and ``vllm_report`` share it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import journal_text, strip_probe
from ansible_collections.llmops.serving.plugins.module_utils.vllm_metrics import (
    parse_metrics, parse_startup_log, summarize_models)


def read_kv_cache(client, unit=None, source="auto", journal_lines=5000, runner=None):
    """The result of vllm_kv_cache_info (without ``changed``): ``source`` is metrics,
    journal or none (then ``error`` says why); ``runner`` runs journalctl."""
    result = dict(url=client.url, source="none", engines=[], models={}, metrics_probe=None,
                  error=None)
    errors = []
    if source in ("auto", "metrics"):
        m = client.metrics()
        result["metrics_probe"] = strip_probe(m)
        if m["ok"]:
            engines = parse_metrics(m["text"] or "")
            if engines:
                result.update(source="metrics", engines=engines, models=summarize_models(engines))
            else:
                errors.append("/metrics has no vllm: metrics (server started with --disable-log-stats?)")
        else:
            errors.append(m["error"])
    if result["source"] == "none" and source in ("auto", "journal"):
        if unit:
            text = journal_text(unit, journal_lines, **({"runner": runner} if runner else {}))
            engines = parse_startup_log(text)
            if engines:
                result.update(source="journal", engines=engines, models=summarize_models(engines))
            else:
                errors.append("no 'KV cache size' line in the last %d journal lines of %s"
                              % (journal_lines, unit))
        else:
            errors.append("no unit given for the journal fallback")
    if result["source"] == "none":
        result["error"] = "; ".join(e for e in errors if e)
    return result
