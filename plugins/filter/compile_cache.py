# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters of vllm_service's fleet compile cache (rules live in module_utils/compile_cache.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import compile_cache as cc


def vllm_compile_cache_records(keys, directory):
    """{key: the controller's record of it (parsed KEY.json), or None when there is none}.
    An unreadable record is returned as {"unreadable": reason}: record_problems refuses it."""
    out = {}
    for key in keys or []:
        if not key:
            continue
        if not cc.KEY_RE.match(str(key)):
            raise AnsibleFilterError("vllm_compile_cache_records: %r is not a key (64 hex digits)" % (key,))
        path = os.path.join(directory, "%s.json" % key)
        if not os.path.exists(path):
            out[key] = None
            continue
        try:
            with open(path) as f:
                out[key] = json.load(f)
        except (OSError, IOError, ValueError) as e:
            out[key] = {"unreadable": "%s: %s" % (path, e)}
    return out


def vllm_compile_cache_seed_plan(infos, records):
    """The key results of vllm_compile_cache (action key) -> per instance: seed or not, and why."""
    return cc.seed_plan(infos or [], records or {})


def vllm_compile_cache_collect_plan(play_hosts, hostvars, infos_var="_vllm_cc", serving_var="_vllm_cc_serving",
                                    plan_var="_vllm_cc_seed"):
    """Play hosts in order -> {host: [instances to collect]}: for each key without a valid controller
    record, the first serving instance in play order that has it (one collector per key)."""
    rows, valid = [], set()
    for host in play_hosts:
        hv = hostvars[host] if host in hostvars else {}
        serving = set(hv.get(serving_var) or [])
        for info in (hv.get(infos_var) or {}).get("instances") or []:
            rows.append({"host": host, "name": info["name"], "key": info.get("key"),
                         "serving": info["name"] in serving})
        valid.update(item["key"] for item in hv.get(plan_var) or [] if item.get("artifact") == "valid")
    plan = cc.collect_plan(rows, valid)
    for host in play_hosts:
        plan.setdefault(host, [])
    return plan


def vllm_instances_compiling(views):
    """Names of the instances (vllm_view entries) whose model vLLM compiles (not --enforce-eager, not -O0)."""
    return [v["name"] for v in views or [] if cc.compiles(v.get("argv") or [])]


def vllm_compile_cache_record(packed, key, fields, dirs, host, name):
    """The controller record of a collected artifact (what record_problems accepts)."""
    return {"key": key, "fields": fields, "archive": cc.archive_name(key, packed["sha256"]),
            "sha256": packed["sha256"], "bytes": packed["bytes"], "files": packed["files"], "dirs": list(dirs),
            "collected_from": {"host": host, "instance": name}}


class FilterModule(object):
    def filters(self):
        return dict((f.__name__, f) for f in (
            vllm_compile_cache_records, vllm_compile_cache_seed_plan, vllm_compile_cache_collect_plan,
            vllm_compile_cache_record, vllm_instances_compiling))
