# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the LoRA adapters a running vLLM instance serves (``vllm_lora``).

Read with the vllm_lora module in check mode against each instance that lists
adapters: what it would load is missing on the server, what it would unload is
an adapter the inventory does not list (loaded at runtime by hand), and an
adapter served from another path is "other path".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import item_name


def lora_rows(host, data):
    """``data``: ``results`` (the registered loop result of vllm_lora in check mode; ``item`` =
    the instance's view entry). An instance that did not answer has no adapter rows (its unit
    and health rows say why)."""
    rows = []
    for res in data.get("results") or []:
        if res.get("skipped") or res.get("failed"):
            continue
        inst = item_name(res)
        wanted = dict((a["name"], a["path"]) for a in (res.get("item") or {}).get("lora_adapters") or [])
        loaded, unloaded = res.get("loaded") or [], res.get("unloaded") or []
        for name in loaded:
            other = name in unloaded
            rows.append(dict(host=host, component="vllm_lora", instance=inst, path=wanted.get(name, ""),
                             expected="adapter %s served" % name,
                             found="served from another path" if other else "not served",
                             detail=[]))
        for name in unloaded:
            if name in loaded:
                continue
            rows.append(dict(host=host, component="vllm_lora", instance=inst, path="",
                             expected="no adapter %s (not in lora_adapters)" % name,
                             found="served (loaded at runtime)", detail=[]))
    return rows
