# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the gateway role (haproxy package, config, drop-in, model and key maps, service)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import file_row, service_rows


def gateway_rows(host, data):
    """Drift rows of the gateway role on one host.

    ``data`` keys: ``config_path``/``config`` (haproxy.cfg template result),
    ``dropin_path``/``dropin``, ``models_path``/``models`` (model map copy
    result), ``hold_path``/``hold`` (hold.lua copy result; absent with the hold off), ``usage_path``/``usage``
    (usage.lua copy result), ``models_lua_path``/``models_lua`` (models.lua copy result), ``keys_path``/``keys_changed`` (key map: only whether it changed,
    the result is secret), ``file_stats`` ({path: exists}), ``installed``
    (haproxy binary present), ``service`` (``systemctl show`` stdout).
    """
    rows = []
    stats = data.get("file_stats") or {}
    if not data.get("installed", True):
        rows.append(dict(host=host, component="gateway_package", instance=None, path="/usr/sbin/haproxy",
                         expected="haproxy installed", found="not installed", detail=[]))
    for component, path_key, res_key in (("gateway_config", "config_path", "config"),
                                         ("gateway_dropin", "dropin_path", "dropin"),
                                         ("gateway_models_map", "models_path", "models"),
                                         ("gateway_hold_lua", "hold_path", "hold"),
                                         ("gateway_usage_lua", "usage_path", "usage"),
                                         ("gateway_models_lua", "models_lua_path", "models_lua")):
        path = data.get(path_key)
        if path is None:
            continue
        row = file_row(host, component, None, path, data.get(res_key), stats.get(path))
        if row:
            rows.append(row)
    if data.get("keys_changed"):
        path = data.get("keys_path")
        rows.append(dict(host=host, component="gateway_keys_map", instance=None, path=path,
                         expected="as rendered by the role",
                         found="missing" if stats.get(path) is False else "differs (contents not shown)", detail=[]))
    if data.get("service") is not None:
        rows.extend(service_rows(host, "haproxy.service", data.get("service")))
    return rows
