# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the ray_cluster role (Ray version in the venv, the node's unit and service, the membership)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import file_row, service_rows, version_row


def _membership_rows(host, data):
    """``ray_membership`` rows, read on the head: one per node of the group that
    ``ray status`` does not list (``host`` = that node), one on the head per
    other problem (declared totals, active count), or one on the head when
    ``ray status`` was not read (the head's unit is not active)."""
    expected = data.get("expected") or {}
    cluster = "ray cluster %s" % data.get("head_address")
    want = "every node of the group joined (%s)" % ", ".join(sorted(expected))
    status = data.get("status") or {}
    if not status or status.get("skipped"):
        return [dict(host=host, component="ray_membership", instance=None, path=cluster, expected=want,
                     found="not read (%s.service is not active)" % data.get("service_name", "ray-head"), detail=[])]
    seen = vllm_multinode.membership(expected, vllm_multinode.parse_ray_status(status.get("stdout") or ""))
    failed = []
    if status.get("rc", 0) != 0:
        err = (status.get("stderr") or status.get("msg") or "").strip().splitlines()
        failed = ["`ray status` failed on %s: %s" % (host, err[-1] if err else "rc=%s" % status.get("rc"))]
    rows = []
    for idx, node in enumerate(seen["missing"]):
        rows.append(dict(host=node, component="ray_membership", instance=None, path=cluster,
                         expected="joined (resource %s)" % vllm_multinode.node_resource(node),
                         found="not in `ray status` on %s" % host, detail=[seen["problems"][idx]] + failed))
    if not seen["missing"]:
        for problem in seen["problems"]:
            rows.append(dict(host=host, component="ray_membership", instance=None, path=cluster, expected=want,
                             found=problem, detail=[]))
    return rows


def ray_rows(host, data):
    """Drift rows of the ray_cluster role on one node.

    ``data`` keys (all optional):
      venv, expected_version: the venv and ``ray_version``
      found_version: registered result of the version read (stdout: the version; rc != 0: not installed)
      unit_path, unit: registered result of the unit template (check mode, diff), unit_exists: stat before it
      other_unit_path, other_unit: registered result of removing the other role's unit (changed: it is there)
      service_name: ``ray-head`` / ``ray-worker``; service: ``systemctl show`` stdout (None: not read)
      service_state: ``ray_service_state`` (``started``, ``stopped``)
      is_head, head_address (``ADDRESS:PORT``), expected ({node: {resource: amount}}, every node of the group),
      status: registered ``ray status`` result on the head (skipped: not read)

    Components: ``ray_version``, ``ray_unit``, ``ray_service``, and on the head
    ``ray_membership`` (a missing node's row names that node as ``host``).
    """
    rows = []
    found = data.get("found_version") or {}
    if found and not found.get("skipped"):
        row = version_row(host, "ray_version", data.get("venv"), "ray", str(data.get("expected_version", "")), found)
        if row:
            rows.append(row)
    row = file_row(host, "ray_unit", None, data.get("unit_path"), data.get("unit"), data.get("unit_exists"))
    if row:
        rows.append(row)
    if (data.get("other_unit") or {}).get("changed"):
        rows.append(dict(host=host, component="ray_unit", instance=None, path=data.get("other_unit_path"),
                         expected="absent (this node runs %s.service)" % data.get("service_name"),
                         found="present (the unit of the other role)", detail=[]))
    state = data.get("service_state", "started")
    if data.get("service") is not None:
        for r in service_rows(host, "%s.service" % data.get("service_name"), data.get("service"), want_state=state):
            r["component"] = "ray_service"
            rows.append(r)
    if data.get("is_head") and state == "started":
        rows.extend(_membership_rows(host, data))
    return rows
