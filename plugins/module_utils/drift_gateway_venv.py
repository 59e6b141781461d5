# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the gateway role and of the venv a running vLLM instance uses.

Same row shape and helpers as ``drift`` (``_file_row``, ``_service_rows``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.llmops.serving.plugins.module_utils.drift import _file_row, _item_name, _service_rows


def venv_in_use_rows(host, data):
    """``venv_in_use`` rows: an instance whose process runs from another venv than the inventory's.

    ``data``: ``venv`` (the venv this inventory deploys) and ``cmdlines`` (the
    registered loop result of reading argv[0] of each instance's MainPID;
    ``item`` = the instance, ``stdout`` = argv[0], NUL-terminated).
    """
    rows = []
    venv = (data.get("venv") or "").rstrip("/")
    for res in (data.get("cmdlines") or {}).get("results", []):
        if res.get("skipped") or res.get("rc", 1) != 0:
            continue
        argv0 = (res.get("stdout") or "").strip("\x00\n ")
        if not argv0.endswith("/bin/python") and "/bin/python" not in argv0:
            continue
        found = posixpath.dirname(posixpath.dirname(argv0))
        if venv and found != venv:
            rows.append(dict(host=host, component="venv_in_use", instance=_item_name(res), path=argv0,
                             expected=venv, found=found + " (restart pending)", detail=[]))
    return rows


def gateway_rows(host, data):
    """Drift rows of the gateway role on one host.

    ``data`` keys: ``config_path``/``config`` (haproxy.cfg template result),
    ``dropin_path``/``dropin``, ``models_path``/``models`` (model map copy
    result), ``keys_path``/``keys_changed`` (key map: only whether it changed,
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
                                         ("gateway_models_map", "models_path", "models")):
        path = data.get(path_key)
        row = _file_row(host, component, None, path, data.get(res_key), stats.get(path))
        if row:
            rows.append(row)
    if data.get("keys_changed"):
        path = data.get("keys_path")
        rows.append(dict(host=host, component="gateway_keys_map", instance=None, path=path,
                         expected="as rendered by the role",
                         found="missing" if stats.get(path) is False else "differs (contents not shown)", detail=[]))
    if data.get("service") is not None:
        rows.extend(_service_rows(host, "haproxy.service", data.get("service")))
    return rows
