# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""One round of health and readiness probes of a vLLM instance: liveness,
version, models, the readiness completion, the unit's state, restarts and the
watchdog's record. ``vllm_health`` (which adds the wait loop) and
``vllm_report`` (the fleet report's reads in one module run) share it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_client
from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import combine_state, strip_probe, unit_state
from ansible_collections.llmops.serving.plugins.module_utils import vllm_watchdog

# vllm_health's probe options and their defaults (what vllm_report passes).
PROBE_DEFAULTS = {"model": None, "unit": None, "readiness": True, "readiness_prompt": vllm_client.READINESS_PROMPT,
                  "readiness_max_tokens": 1, "readiness_timeout": 60.0, "watchdog_state": None}


def watchdog_path(params):
    """The watchdog state file: given, or derived from a ``vllm@NAME.service`` unit."""
    unit = params["unit"] or ""
    if params["watchdog_state"]:
        return params["watchdog_state"]
    if unit.startswith("vllm@") and unit.endswith(".service"):
        return vllm_watchdog.state_path(unit[len("vllm@"):-len(".service")])
    return None


def restart_fields(params, unit):
    """``restarts`` and ``watchdog`` of the result."""
    path = watchdog_path(params)
    wd = vllm_watchdog.summary(vllm_watchdog.read_state(path) if path else None)
    restarts = {"n_restarts": (unit or {}).get("n_restarts"),
                "start_limit_hit": (unit or {}).get("result") == "start-limit-hit" if unit else None,
                "watchdog_last_hour": wd["restarts_last_hour"]}
    return restarts, wd


def probe(p, client, runner=None):
    """One round of probes with the options ``p`` of vllm_health (``unit``, ``model``,
    ``readiness*``, ``watchdog_state``); ``runner`` runs systemctl (run_command of the
    calling module). Returns the result dict (without wait keys)."""
    unit = unit_state(p["unit"], **({"runner": runner} if runner else {})) if p["unit"] else None
    health = client.health()
    result = {"url": client.url, "liveness": strip_probe(health), "version": None, "models": [],
              "model": p["model"], "max_model_len": None, "readiness": None, "probes": {}, "unit": unit}
    readiness = None
    if health["ok"]:
        v = client.version()
        result["version"] = v["version"]
        m = client.models()
        result["models"] = m["models"]
        result["probes"] = {"version": strip_probe(v), "models": strip_probe(m)}
        model = p["model"] or (m["models"][0]["id"] if m["models"] else None)
        result["model"] = model
        for entry in m["models"]:
            if entry["id"] == model:
                result["max_model_len"] = entry["max_model_len"]
        if p["readiness"]:
            if model is None:
                readiness = {"ok": False, "status": m["status"], "latency_s": None, "tokens": 0,
                             "error_kind": "error",
                             "error": "no model to query: /v1/models failed (%s); set model (and api_key)"
                                      % m["error"]}
            else:
                readiness = client.completion(model, prompt=p["readiness_prompt"],
                                              max_tokens=p["readiness_max_tokens"],
                                              timeout=p["readiness_timeout"])
            result["readiness"] = strip_probe(readiness) if readiness else None
            result["readiness"]["tokens"] = readiness.get("tokens", 0)
    state, reason = combine_state(health, readiness, unit)
    result["restarts"], result["watchdog"] = restart_fields(p, unit)
    result["state"] = state
    result["reason"] = reason
    result["ready"] = state == "ready"
    return result
