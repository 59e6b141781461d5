# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the flash_attn role (wheel cache, installed version, wheel copy, install record)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import file_row


def _short(key):
    return (key or "")[:12] or "(none)"


def flash_attn_rows(host, data):
    """Drift rows of the flash_attn role on one host.

    ``data`` keys:
      skipped: the role skipped this host (CPU host, GPU below sm_80, disabled,
        or check mode before the venv has torch); probe: registered result of
        the role's flash_attn_info probe (the state before any change)
      version, key, key_string: what the inventory and the host's torch ask for
      venv, builder, cache_dir, cache_hit: where and whether the key's wheel is cached
      needs_install: the role's decision for the venv
      wheel_path, wheel_copy, wheel_exists: the host's copy of the wheel
      state_file, state_record, state_exists: the install record
    """
    rows = []
    probe = data.get("probe") or {}
    venv = data.get("venv")
    version = str(data.get("version", ""))
    if data.get("skipped"):
        if probe and not probe.get("available", True):
            rows.append(dict(host=host, component="flash_attn_version", instance=None, path=venv,
                             expected="flash-attn==%s" % version,
                             found="venv has no torch yet (%s)" % (probe.get("msg") or "not importable"), detail=[]))
        return rows
    key = data.get("key")
    if not data.get("cache_hit"):
        rows.append(dict(host=host, component="flash_attn_wheel_cache", instance=None, path=data.get("cache_dir"),
                         expected="flash_attn-%s wheel for key %s" % (version, _short(key)),
                         found="not built yet (a real run builds it on %s)" % (data.get("builder") or "the first host with the key"),
                         detail=[data.get("key_string")] if data.get("key_string") else []))
    if data.get("needs_install"):
        installed = probe.get("flash_attn_version")
        rows.append(dict(host=host, component="flash_attn_version", instance=None, path=venv,
                         expected="flash-attn==%s (key %s)" % (version, _short(key)),
                         found=("flash-attn==%s (key %s)" % (installed, _short(probe.get("installed_key")))
                                if installed else "not installed"),
                         detail=[]))
    copy = data.get("wheel_copy") or {}
    if copy.get("changed"):
        rows.append(dict(host=host, component="flash_attn_wheel", instance=None, path=data.get("wheel_path"),
                         expected="the cached wheel of key %s" % _short(key),
                         found="differs from the cache" if data.get("wheel_exists") else "missing", detail=[]))
    row = file_row(host, "flash_attn_state", None, data.get("state_file"), data.get("state_record"),
                   data.get("state_exists"))
    if row:
        row["expected"] = "the install record of key %s" % _short(key)
        rows.append(row)
    return rows
