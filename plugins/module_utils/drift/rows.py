# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The row shape and the helpers every component's drift rows share.

A drift row names one thing on one host that differs from what the inventory
says it should be: ``host``, ``component``, ``instance``, ``path``,
``expected``, ``found`` and ``detail`` (the changed lines of a hand-edited file,
values left out for environment files).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible_collections.llmops.serving.plugins.module_utils import systemd

MAX_DETAIL_LINES = 12


def _diffs(result):
    diff = (result or {}).get("diff")
    if not diff:
        return []
    if isinstance(diff, dict):
        return [diff]
    return [d for d in diff if isinstance(d, dict)]


def changed_lines(result, redact_values=False):
    """The ``-``/``+`` lines of a template result's diff (empty without diff).

    With ``redact_values`` only ``KEY=`` is kept of ``KEY=VALUE`` lines so that
    environment values (tokens, keys) never reach a report file.
    """
    out = []
    for diff in _diffs(result):
        before = diff.get("before")
        after = diff.get("after")
        if not isinstance(before, str) or not isinstance(after, str):
            continue
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
            if line.startswith(("---", "+++", "@@")):
                continue
            if redact_values and "=" in line[1:]:
                line = line[0] + line[1:].split("=", 1)[0] + "=..."
            out.append(line)
    return out[:MAX_DETAIL_LINES] + (["... (%d more)" % (len(out) - MAX_DETAIL_LINES)] if len(out) > MAX_DETAIL_LINES else [])


def file_row(host, component, instance, path, result, exists, redact_values=False):
    if not (result or {}).get("changed"):
        return None
    if exists is False:
        found = "missing"
        detail = []
    else:
        found = "hand-edited (differs from the rendered template)"
        detail = changed_lines(result, redact_values=redact_values)
        # `-` lines are on the host, `+` lines are what the role writes.
    return dict(host=host, component=component, instance=instance, path=path,
                expected="as rendered by the role", found=found, detail=detail)


def item_name(result):
    item = (result or {}).get("item")
    if isinstance(item, dict):
        return item.get("name")
    return item


def service_rows(host, unit, show_stdout, want_enabled=True, want_state="started", instance=None):
    """service / service_active / service_enabled rows from ``systemctl show`` output."""
    rows = []
    props = systemd.parse_show(show_stdout)
    if props.get("LoadState") == "not-found":
        return [dict(host=host, component="service", instance=instance, path=unit,
                     expected="installed", found="unit not found", detail=[])]
    active = props.get("ActiveState", "unknown")
    if want_state in ("started", "restarted", "reloaded") and active != "active":
        rows.append(dict(host=host, component="service_active", instance=instance, path=unit,
                         expected="active", found="%s (%s)" % (active, props.get("SubState", "?")), detail=[]))
    elif want_state == "stopped" and active == "active":
        rows.append(dict(host=host, component="service_active", instance=instance, path=unit,
                         expected="inactive", found="active", detail=[]))
    ufs = props.get("UnitFileState", "unknown")
    is_enabled = ufs in ("enabled", "enabled-runtime", "alias", "static", "indirect", "generated")
    if want_enabled and not is_enabled:
        rows.append(dict(host=host, component="service_enabled", instance=instance, path=unit,
                         expected="enabled", found=ufs, detail=[]))
    elif not want_enabled and ufs == "enabled":
        rows.append(dict(host=host, component="service_enabled", instance=instance, path=unit,
                         expected="disabled", found=ufs, detail=[]))
    return rows


def version_row(host, component, path, package, expected, found):
    """A ``<component>`` row when the registered version read ``found`` is not ``expected`` (None when it is)."""
    version = (found.get("stdout") or "").strip()
    if found.get("rc", 0) != 0 or not version:
        err = (found.get("stderr") or found.get("msg") or "").strip().splitlines()
        return dict(host=host, component=component, instance=None, path=path,
                    expected="%s==%s" % (package, expected), found="not installed", detail=err[-1:])
    if version != expected:
        return dict(host=host, component=component, instance=None, path=path,
                    expected="%s==%s" % (package, expected), found="%s==%s" % (package, version), detail=[])
    return None
