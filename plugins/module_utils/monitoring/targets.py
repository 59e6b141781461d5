# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Prometheus ``file_sd`` target groups, one list per job, from the inventory.

Input: one record per fleet host (built by the filter from hostvars)::

    {"host": "node1", "address": "10.0.0.5", "local": False,
     "vllm_view": [...],            # the vllm_service instance view (contract fields only)
     "node_exporter_port": 9100,
     "dcgm_exporter_port": 9400 or None,
     "gpustack_metrics_port": 10161 or None,
     "gateway": {"port": 9000, "path": "/metrics"} or None}

``local`` is true when the host is the Prometheus host itself: loopback
binds are then reachable. Output: ``{job: [target group, ...]}`` in the
``file_sd`` format (``targets`` + ``labels``); jobs without targets are
present with an empty list so that a stale file is emptied.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The view's own address rules (one place: vllm_instance/values.py).
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.values import is_loopback, is_wildcard  # noqa: F401

JOBS = ("vllm", "node", "dcgm", "gpustack", "gateway")


class TargetError(Exception):
    pass


def hostport(addr, port):
    addr = str(addr).strip("[]")
    if ":" in addr:
        addr = "[%s]" % addr
    return "%s:%d" % (addr, int(port))


def vllm_address(rec, inst):
    """host:port Prometheus scrapes for one instance (raises TargetError)."""
    bind = str(inst.get("host") or "")
    probe = inst.get("probe_host") or bind or "127.0.0.1"
    if rec.get("local"):
        return hostport(probe, inst["port"])
    if is_wildcard(bind):
        return hostport(rec["address"], inst["port"])
    if is_loopback(bind):
        raise TargetError(
            "vLLM instance %r on host %s binds %s, which a Prometheus on another host cannot scrape. "
            "Fix: bind a private address (vllm_instances[].host), or run Prometheus on %s "
            "(put it in the monitoring group)." % (inst.get("name"), rec["host"], bind, rec["host"]))
    return hostport(bind, inst["port"])


def gpus_label(gpus):
    if gpus is None:
        return "none"
    return ",".join(str(g) for g in gpus)


def vllm_groups(rec):
    groups = []
    for inst in vllm_multinode.serving(rec.get("vllm_view")):
        for key in ("name", "port", "unit"):
            if inst.get(key) in (None, ""):
                raise TargetError("vllm_view entry on host %s has no %r (a vllm_service instance view field)"
                                  % (rec["host"], key))
        groups.append({
            "targets": [vllm_address(rec, inst)],
            "labels": {
                "host": rec["host"],
                "vllm_instance": str(inst["name"]),
                "served_model": str(inst.get("served_name") or ""),
                "gpus": gpus_label(inst.get("gpus")),
                "unit": str(inst["unit"]),
            },
        })
    return groups


def _one(rec, port, path=None):
    addr = "127.0.0.1" if rec.get("local") else rec["address"]
    labels = {"host": rec["host"]}
    if path and path != "/metrics":
        labels["__metrics_path__"] = path
    return {"targets": [hostport(addr, port)], "labels": labels}


def build_targets(records):
    jobs = dict((job, []) for job in JOBS)
    for rec in sorted(records, key=lambda r: r["host"]):
        jobs["vllm"].extend(vllm_groups(rec))
        if rec.get("node_exporter_port"):
            jobs["node"].append(_one(rec, rec["node_exporter_port"]))
        if rec.get("dcgm_exporter_port"):
            jobs["dcgm"].append(_one(rec, rec["dcgm_exporter_port"]))
        if rec.get("gpustack_metrics_port"):
            jobs["gpustack"].append(_one(rec, rec["gpustack_metrics_port"]))
        gw = rec.get("gateway")
        if gw and gw.get("port"):
            jobs["gateway"].append(_one(rec, gw["port"], gw.get("path")))
    return jobs


def host_record(host, hv, settings):
    """One input record from a host's variables (a dict-like hostvars entry).

    Per-host variables win over ``settings`` (the monitoring host's role
    defaults). Only the instance view contract is read for vLLM.
    """
    groups = settings.get("groups") or {}
    local = host == settings.get("prometheus_host")
    view = hv.get("vllm_view") if host in (groups.get("vllm") or []) else None
    if host in (groups.get("vllm") or []) and view is None:
        raise TargetError("host %s is in the vllm group but has no vllm_view fact: run the instance view "
                          "(include_role llmops.serving.vllm_service, tasks_from: view) in a play over "
                          "the vllm hosts before the monitoring play" % host)
    view = view or []
    gpu_host = any(i.get("gpus") or i.get("device") == "cuda" for i in view)
    dcgm = hv.get("monitoring_dcgm_exporter_binary", settings.get("dcgm_exporter_binary")) or ""
    gpustack_port = None
    if host in (groups.get("gpustack_server") or []):
        cfg = {}
        cfg.update(hv.get("gpustack_config") or {})
        cfg.update(hv.get("gpustack_server_config") or {})
        if not cfg.get("disable_metrics"):
            gpustack_port = cfg.get("metrics_port") or settings.get("gpustack_metrics_port")
    gateway = None
    if host in (groups.get("gateway") or []) and hv.get("gateway_metrics_port"):
        gateway = {"port": hv.get("gateway_metrics_port"), "path": hv.get("gateway_metrics_path") or "/metrics"}
    return {
        "host": host,
        "address": hv.get("monitoring_address") or hv.get("ansible_host") or host,
        "local": local,
        "vllm_view": view,
        "node_exporter_port": hv.get("monitoring_node_exporter_port", settings.get("node_exporter_port")),
        "dcgm_exporter_port": (hv.get("monitoring_dcgm_exporter_port", settings.get("dcgm_exporter_port"))
                               if gpu_host and dcgm else None),
        "gpustack_metrics_port": gpustack_port,
        "gateway": gateway,
    }


def fleet_hosts(groups, fleet_groups):
    seen = []
    for name in fleet_groups:
        for host in groups.get(name) or []:
            if host not in seen:
                seen.append(host)
    return seen


def probe_config(view):
    """The readiness probe's instance list: contract fields only, no secrets (the watchdog's state file: its
    revivals and give-up become metrics). Every path and unit name is the view's (vllm_instance_paths)."""
    return [{"name": i["name"], "unit": i["unit"], "url": i["url"],
             "model": i.get("served_name") or i.get("model"), "env_path": i["env_path"],
             "watchdog_state": i["watchdog_state"]}
            for i in vllm_multinode.serving(view)]
