# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the vllm_service role (units, drop-ins, env files, version, models, services)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import file_row, item_name, service_rows, version_row


def vllm_rows(host, data):
    """Drift rows of the vllm_service role on one host.

    ``data`` keys (all optional except ``view``):
      view: the host's instance view (vllm_view): each instance's unit,
        dropin_path and env_path (the paths are the view's, never rebuilt here)
      unit_path: the templated unit vllm@.service
      package, expected_version: the pinned distribution
      found_version: registered result of the role's version read
      unit: registered result of the unit template; unit_exists: bool
      dropins, envfiles: registered loop results of the two templates
      file_stats: {path: exists} for the drop-ins and env files
      models: registered loop results of the model stat
      services: registered loop results of ``systemctl show`` per instance
      service_enabled, service_state: what the inventory asks for
    """
    rows = []
    view = dict((v["name"], v) for v in data.get("view") or [])
    file_stats = data.get("file_stats") or {}

    found = data.get("found_version") or {}
    expected_version = str(data.get("expected_version", ""))
    package = data.get("package", "vllm")
    if found:
        row = version_row(host, "vllm_version", data.get("venv"), package, expected_version, found)
        if row:
            rows.append(row)

    row = file_row(host, "unit_file", None, data.get("unit_path"), data.get("unit"), data.get("unit_exists"))
    if row:
        rows.append(row)

    for res in (data.get("dropins") or {}).get("results", []):
        name = item_name(res)
        path = view[name]["dropin_path"]
        row = file_row(host, "dropin", name, path, res, file_stats.get(path))
        if row:
            rows.append(row)

    for res in (data.get("envfiles") or {}).get("results", []):
        name = item_name(res)
        path = view[name]["env_path"]
        row = file_row(host, "env_file", name, path, res, file_stats.get(path), redact_values=True)
        if row:
            rows.append(row)

    for res in (data.get("models") or {}).get("results", []):
        stat = res.get("stat")
        if res.get("skipped") or not isinstance(stat, dict):
            continue
        item = res.get("item") or {}
        if not stat.get("exists"):
            rows.append(dict(host=host, component="model_dir", instance=item.get("name"), path=item.get("model"),
                             expected="present", found="missing", detail=[]))
        elif not stat.get("isdir", True) and not stat.get("islnk", False):
            rows.append(dict(host=host, component="model_dir", instance=item.get("name"), path=item.get("model"),
                             expected="directory", found="not a directory", detail=[]))

    want_enabled = bool(data.get("service_enabled", True))
    want_state = data.get("service_state", "started")
    for res in (data.get("services") or {}).get("results", []):
        name = item_name(res)
        rows.extend(service_rows(host, view[name]["unit"], res.get("stdout"),
                                 want_enabled=want_enabled, want_state=want_state, instance=name))
    return rows
