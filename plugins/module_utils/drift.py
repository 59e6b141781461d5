# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Turn what a check-mode run of a role found into drift rows.

A drift row names one thing on one host that differs from what the inventory
says it should be: ``host``, ``component``, ``instance``, ``path``,
``expected``, ``found`` and ``detail`` (the changed lines of a hand-edited file,
values left out for environment files).

The inputs are plain data: the results the vllm_service role registered while
it ran in check mode (template results with their diff, the version it read
from the venv, the model stat results) and the ``systemctl show`` output of
each instance. The logic is pure so that it is testable without a host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible_collections.llmops.serving.plugins.module_utils import systemd

SHOW_PROPERTIES = ("ActiveState", "SubState", "UnitFileState", "MainPID", "ExecMainStartTimestamp", "LoadState")
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


def _file_row(host, component, instance, path, result, exists, redact_values=False):
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


def _item_name(result):
    item = (result or {}).get("item")
    if isinstance(item, dict):
        return item.get("name")
    return item


def _service_rows(host, unit, show_stdout, want_enabled=True, want_state="started", instance=None):
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


def _version_row(host, component, path, package, expected, found):
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


def vllm_rows(host, data):
    """Drift rows of the vllm_service role on one host.

    ``data`` keys (all optional except ``instances``):
      instances: the host's vllm_instances
      unit_dir, config_dir: where the role writes units and env files
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
    unit_dir = data.get("unit_dir", "/etc/systemd/system")
    config_dir = data.get("config_dir", "/etc/vllm")
    file_stats = data.get("file_stats") or {}

    found = data.get("found_version") or {}
    expected_version = str(data.get("expected_version", ""))
    package = data.get("package", "vllm")
    if found:
        row = _version_row(host, "vllm_version", data.get("venv"), package, expected_version, found)
        if row:
            rows.append(row)

    unit_path = "%s/vllm@.service" % unit_dir
    row = _file_row(host, "unit_file", None, unit_path, data.get("unit"), data.get("unit_exists"))
    if row:
        rows.append(row)

    for res in (data.get("dropins") or {}).get("results", []):
        name = _item_name(res)
        path = "%s/vllm@%s.service.d/10-instance.conf" % (unit_dir, name)
        row = _file_row(host, "dropin", name, path, res, file_stats.get(path))
        if row:
            rows.append(row)

    for res in (data.get("envfiles") or {}).get("results", []):
        name = _item_name(res)
        path = "%s/%s.env" % (config_dir, name)
        row = _file_row(host, "env_file", name, path, res, file_stats.get(path), redact_values=True)
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
        name = _item_name(res)
        rows.extend(_service_rows(host, "vllm@%s.service" % name, res.get("stdout"),
                                  want_enabled=want_enabled, want_state=want_state, instance=name))
    return rows


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
    row = _file_row(host, "flash_attn_state", None, data.get("state_file"), data.get("state_record"),
                    data.get("state_exists"))
    if row:
        row["expected"] = "the install record of key %s" % _short(key)
        rows.append(row)
    return rows


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
            row = _version_row(host, "gpustack_version", data.get("venv"), "gpustack", expected_version, found)
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

    row = _file_row(host, "gpustack_unit", None, data.get("unit_path"), data.get("unit"), data.get("unit_exists"))
    if row:
        rows.append(row)

    if data.get("manage_service", True) and data.get("service") is not None:
        rows.extend(_service_rows(host, "%s.service" % data.get("service_name", "gpustack"), data.get("service")))
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
    run in check mode with diff (``playbooks/tasks/gpustack_models.yml``). One
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


def unreachable_rows(all_hosts, ok_hosts):
    """A row for each host that failed or was unreachable during the drift run."""
    ok = set(ok_hosts or [])
    return [dict(host=h, component="host", instance=None, path=None, expected="reachable, role ran in check mode",
                 found="unreachable or failed (see the play output)", detail=[])
            for h in (all_hosts or []) if h not in ok]


def collect(hostvars, targets):
    """All rows of a drift run and a ``host`` row for each host that did not finish.

    ``targets`` maps a component play (``vllm``, ``flash_attn``, ``gpustack``)
    to the hosts that play targeted; each host that finished that play has the
    fact ``drift_rows_<component>`` (a list, maybe empty). A targeted host
    without it failed or was unreachable: one ``host`` row each (not one per play).
    """
    rows = []
    missing = []
    for component in sorted(targets or {}):
        for host in targets[component] or []:
            hv = hostvars[host] if host in hostvars else {}
            found = hv.get("drift_rows_%s" % component)
            if found is None:
                if host not in missing:
                    missing.append(host)
                continue
            rows.extend(found)
    for host in missing:
        rows.extend(unreachable_rows([host], []))
    return rows


def drift_table(rows):
    """A fixed-width text table (HOST COMPONENT INSTANCE PATH EXPECTED FOUND) and the detail lines."""
    header = ("HOST", "COMPONENT", "INSTANCE", "PATH", "EXPECTED", "FOUND")
    cells = [header] + [tuple(str(r.get(k) if r.get(k) is not None else "-")
                              for k in ("host", "component", "instance", "path", "expected", "found"))
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    lines = []
    for idx, c in enumerate(cells):
        lines.append("  ".join(v.ljust(w) for v, w in zip(c[:-1], widths)) + "  " + c[-1])
        if idx > 0:
            for d in rows[idx - 1].get("detail") or []:
                lines.append("    " + d)
    if not rows:
        lines.append("(no drift)")
    return "\n".join(lines)
