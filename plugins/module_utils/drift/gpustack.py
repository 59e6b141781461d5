# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the gpustack role (server/worker) and of the inventory's GPUStack models."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import file_row, service_rows, version_row


def gpustack_rows(host, data):
    """Drift rows of the gpustack role (server or worker) on one host.

    ``data`` keys (all optional except ``install_method``):
      install_method: ``pip`` or ``container``
      venv, expected_version: the pip venv and the pinned gpustack version
      found_version: registered result of the role's version read (pip)
      image: ``name:tag`` of the pinned image; image_pull: registered pull result (container)
      config_path: config.yaml; config_changed: bool (the template result's
        ``changed`` only: the file holds secrets, so no line of it is ever shown)
      config_exists, unit_exists: bool (stat before the templates)
      unit_path: the systemd unit; unit: registered result of the unit template
      service_name: the unit name without ``.service``; service: ``systemctl show`` stdout
      manage_service: whether the role manages the service (false: no service rows)
    """
    rows = []
    method = data.get("install_method", "pip")
    expected_version = str(data.get("expected_version", ""))
    if method == "pip":
        found = data.get("found_version") or {}
        if found and not found.get("skipped"):
            row = version_row(host, "gpustack_version", data.get("venv"), "gpustack", expected_version, found)
            if row:
                rows.append(row)
    else:
        pull = data.get("image_pull") or {}
        if pull.get("changed"):
            rows.append(dict(host=host, component="gpustack_image", instance=None, path=None,
                             expected="%s present" % data.get("image"), found="not present", detail=[]))

    if data.get("config_changed"):
        # No detail lines: config.yaml holds the bootstrap password, token and database URL.
        rows.append(dict(host=host, component="gpustack_config", instance=None, path=data.get("config_path"),
                         expected="as rendered by the role",
                         found="missing" if data.get("config_exists") is False
                         else "hand-edited (differs from the rendered template; lines not shown, the file holds secrets)",
                         detail=[]))

    row = file_row(host, "gpustack_unit", None, data.get("unit_path"), data.get("unit"), data.get("unit_exists"))
    if row:
        rows.append(row)

    if data.get("manage_service", True) and data.get("service") is not None:
        rows.extend(service_rows(host, "%s.service" % data.get("service_name", "gpustack"), data.get("service")))
    return rows


# Fields of a GPUStack model whose values are never written to a report.
_MODEL_HIDDEN_VALUES = ("env",)


def _model_value(key, value):
    if key in _MODEL_HIDDEN_VALUES and isinstance(value, dict):
        return "{%s}" % ", ".join("%s=..." % k for k in sorted(value))
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, _model_value(k, value[k])) for k in sorted(value) if value[k] is not None)
    if isinstance(value, list):
        return "[%s]" % ", ".join(str(v) for v in value)
    return str(value)


def _model_summary(fields, keys):
    return "; ".join("%s=%s" % (k, _model_value(k, (fields or {}).get(k))) for k in keys)


def gpustack_model_rows(host, results):
    """Drift rows of the inventory's GPUStack models (component ``gpustack_model``).

    ``results``: the registered loop result of ``llmops.serving.gpustack_model``
    run in check mode with diff (entry point ``drift_models`` of the gpustack role). One
    row per model that a converge run would change: expected/found are the
    differing fields (``replicas=1`` / ``replicas=2``); a model that is not on
    the server is ``not registered``; one the server could not be asked about
    is ``not checked`` with the module's message. ``env`` values are never shown.
    """
    rows = []
    for res in (results or {}).get("results", []):
        if res.get("skipped"):
            continue
        item = res.get("item") or {}
        name = item.get("name") if isinstance(item, dict) else item
        path = "model %s" % name
        if res.get("failed"):
            msg = str(res.get("msg") or "failed").strip().splitlines()
            rows.append(dict(host=host, component="gpustack_model", instance=name, path=path,
                             expected="registered as in gpustack_models",
                             found="not checked (the server did not answer)", detail=msg[:1]))
            continue
        if not res.get("changed"):
            continue
        diff = res.get("diff") or {}
        before = diff.get("before") or {}
        after = diff.get("after") or {}
        if not before:
            keys = [k for k in sorted(after) if k not in ("cluster_id",)]
            rows.append(dict(host=host, component="gpustack_model", instance=name, path=path,
                             expected="registered", found="not registered",
                             detail=["+%s=%s" % (k, _model_value(k, after[k])) for k in keys if after[k] is not None]))
        elif not after:
            rows.append(dict(host=host, component="gpustack_model", instance=name, path=path,
                             expected="absent", found="registered", detail=[]))
        else:
            keys = list(res.get("changed_fields") or sorted(set(before) | set(after)))
            detail = []
            if any(k in _MODEL_HIDDEN_VALUES for k in keys):
                detail.append("env values differ (not shown)")
            rows.append(dict(host=host, component="gpustack_model", instance=name, path=path,
                             expected=_model_summary(after, keys), found=_model_summary(before, keys), detail=detail))
    return rows
