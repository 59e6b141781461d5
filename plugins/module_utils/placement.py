# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Deterministic GPU placement for GPUStack models.

Input: the GPUs of each worker, gpu_info style (per GPU ``index``, ``name``,
``memory_total_mib`` and optionally ``memory_used_mib``/``memory_used``), and a
list of models with a memory budget (MiB per GPU, or GiB) and a GPU count.

Output per model: ``gpu_selector`` ``{"gpu_ids": ["<worker>:cuda:<i>", ...],
"gpus_per_replica": n}`` and the ``--gpu-memory-utilization=<x>`` vLLM flag
that makes vLLM take exactly the budget (GPUStack's scheduler also reserves
``total x utilization`` per GPU, so budget and reservation agree).

Rules (no randomness, stable sorts, so the same inventory gives the same
placement):
  * workers are visited in name order, GPUs in index order;
  * models are placed in the order given (inventory order);
  * a model needing ``n`` GPUs gets the first ``n`` GPUs of the first worker
    (by name) that has ``n`` GPUs each with enough unreserved memory
    (best effort packing: first fit);
  * on each GPU, the utilisations of the models placed there plus the share
    already used (``memory_used``, ``system_reserved_mib``) stay <= ``max_utilization``
    (vLLM instances sharing a GPU each take their fraction of the TOTAL memory);
  * the utilisation is ``budget / total`` rounded UP to 2 decimals
    (vLLM's fraction of TOTAL memory) and must be <= ``max_utilization``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math


class PlacementError(ValueError):
    pass


def _num(value, what):
    if isinstance(value, bool) or value is None:
        raise PlacementError("%s must be a number, got %r" % (what, value))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlacementError("%s must be a number, got %r" % (what, value))


def _gpu_used_mib(gpu):
    for key in ("memory_used_mib", "memory_used"):
        if gpu.get(key) is not None:
            return _num(gpu[key], "GPU memory_used")
    return 0.0


def normalize_inventory(workers):
    """``workers``: ``{worker_name: [gpu, ...]}`` or ``{worker_name: {"gpus": [...]}}``
    or a list of ``{"name": worker, "gpus": [...]}``. Returns a sorted list of
    ``(worker, [gpu dicts sorted by index])``."""
    items = []
    if isinstance(workers, dict):
        pairs = list(workers.items())
    elif isinstance(workers, list):
        pairs = []
        for w in workers:
            if not isinstance(w, dict) or "name" not in w:
                raise PlacementError("each worker must be a dict with 'name' and 'gpus', got %r" % (w,))
            pairs.append((w["name"], w))
    else:
        raise PlacementError("workers must be a dict or a list, got %s" % type(workers).__name__)
    for name, value in pairs:
        reserved = 0.0
        if isinstance(value, dict):
            reserved = _num(value.get("system_reserved_mib", 0) or 0, "system_reserved_mib")
            gpus = value.get("gpus", [])
        else:
            gpus = value
        if not isinstance(gpus, list):
            raise PlacementError("GPUs of worker %r must be a list" % (name,))
        norm = []
        for gpu in gpus:
            if not isinstance(gpu, dict) or "index" not in gpu:
                raise PlacementError("GPU of worker %r needs an 'index': %r" % (name, gpu))
            total = _num(gpu.get("memory_total_mib"), "memory_total_mib of %s GPU %s" % (name, gpu.get("index")))
            norm.append({
                "index": int(gpu["index"]),
                "name": gpu.get("name", ""),
                "total_mib": total,
                "free_mib": total - _gpu_used_mib(gpu) - reserved,
                "allocated": 0.0,
            })
        norm.sort(key=lambda g: g["index"])
        items.append((str(name), norm))
    items.sort(key=lambda item: item[0])
    return items


def utilization_for(budget_mib, total_mib):
    """Smallest fraction with 2 decimals such that fraction x total >= budget."""
    if total_mib <= 0:
        raise PlacementError("GPU total memory must be > 0")
    # integer arithmetic on hundredths avoids float drift (same input -> same output)
    hundredths = int(math.ceil(round(budget_mib * 100.0 / total_mib, 6)))
    return hundredths / 100.0


def place(workers, models, max_utilization=0.95, gpu_type="cuda"):
    """Place ``models`` on ``workers``. Returns ``{model_name: placement}``.

    ``models``: list of ``{"name", "memory_mib" or "memory_gib", "gpus": 1}``.
    Raises PlacementError naming the model when it does not fit.
    """
    inventory = normalize_inventory(workers)
    if not isinstance(models, list):
        raise PlacementError("models must be a list")
    result = {}
    for model in models:
        if not isinstance(model, dict) or not model.get("name"):
            raise PlacementError("each model needs a 'name': %r" % (model,))
        name = model["name"]
        if model.get("memory_mib") is not None:
            budget = _num(model["memory_mib"], "memory_mib of model %s" % name)
        elif model.get("memory_gib") is not None:
            budget = _num(model["memory_gib"], "memory_gib of model %s" % name) * 1024.0
        else:
            raise PlacementError("model %r needs memory_mib or memory_gib (memory budget per GPU)" % name)
        if budget <= 0:
            raise PlacementError("memory budget of model %r must be > 0" % name)
        count = int(model.get("gpus", 1) or 1)
        chosen = None
        for worker, gpus in inventory:
            fit = []
            for g in gpus:
                util = utilization_for(budget, g["total_mib"])
                # fractions of TOTAL memory: already allocated + used/reserved + this one <= max
                taken = g["allocated"] + (g["total_mib"] - g["free_mib"]) / g["total_mib"]
                if util + taken <= max_utilization + 1e-9:
                    fit.append((g, util))
            if len(fit) >= count:
                chosen = (worker, fit[:count])
                break
        if chosen is None:
            raise PlacementError(
                "model %r needs %d GPU(s) with %.0f MiB each within --gpu-memory-utilization <= %.2f per GPU; "
                "no worker has that (free per GPU: %s)"
                % (name, count, budget, max_utilization, ", ".join(
                    "%s:%s=%.0fMiB" % (w, g["index"], g["total_mib"] * (max_utilization - g["allocated"]) - (g["total_mib"] - g["free_mib"]))
                    for w, gs in inventory for g in gs) or "no GPUs")
            )
        worker, fit = chosen
        gpus = [g for g, _u in fit]
        util = max(u for _g, u in fit)
        for g in gpus:
            g["allocated"] = round(g["allocated"] + util, 6)
        ids = ["%s:%s:%d" % (worker, gpu_type, g["index"]) for g in gpus]
        result[name] = {
            "worker": worker,
            "gpu_indexes": [g["index"] for g in gpus],
            "gpu_selector": {"gpu_ids": ids, "gpus_per_replica": count},
            "gpu_memory_utilization": util,
            "backend_parameter": "--gpu-memory-utilization=%.2f" % util,
        }
    return result


def merge_backend_parameters(params, utilization):
    """Replace any --gpu-memory-utilization in ``params`` with ``utilization``."""
    out = []
    skip = False
    for p in params or []:
        s = str(p)
        if skip:
            skip = False
            continue
        if s == "--gpu-memory-utilization":
            skip = True
            continue
        if s.startswith("--gpu-memory-utilization="):
            continue
        out.append(s)
    out.append("--gpu-memory-utilization=%.2f" % utilization)
    return out
