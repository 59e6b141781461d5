# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""What is left of a component on a host, and what removing it takes.

One rule, used twice: the ``remove`` entry points of the roles (module
``llmops.serving.leftovers``, playbooks/decommission.yml) act on the plan, and
the drift report (playbooks/drift.yml, play "leftovers") lists the same plan as
rows on a host that is no longer in the component's group.

Pure Python (no Ansible imports): systemctl output and file facts in, a plan out.

* A unit of our own (``vllm@NAME``, ``ray-head``, ``llmops-vllm-probe``) is a
  leftover while it is active, failed or enabled.
* A unit of a Debian package (``haproxy``, ``prometheus``) is ours only while
  one of the component's files is still there (a path of our own, or a
  package configuration file that carries our marker): otherwise it is the
  operator's HAProxy, not a leftover.
* Every path that exists (ours by construction, or a configuration file whose
  content matches the marker) is a leftover.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SHOW_PROPS = "Id,LoadState,ActiveState,SubState,UnitFileState"
_RUNNING = ("active", "activating", "reloading", "deactivating")
_ENABLED = ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias")


def parse_show_blocks(text):
    """``systemctl show -p ... U1 U2`` (blank-line separated blocks) into {Id: props}."""
    units = {}
    for block in (text or "").split("\n\n"):
        props = {}
        for line in block.splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                props[key.strip()] = value.strip()
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def unit_actions(props):
    """What removing a unit takes: a subset of ``stop``, ``disable``, ``reset-failed`` (in that order)."""
    props = props or {}
    actions = []
    if props.get("ActiveState") in _RUNNING:
        actions.append("stop")
    if props.get("UnitFileState") in _ENABLED:
        actions.append("disable")
    if props.get("ActiveState") == "failed":
        actions.append("reset-failed")
    return actions


def unit_found(props):
    """The state of a unit in words: ``active (running), enabled``."""
    props = props or {}
    parts = ["%s (%s)" % (props.get("ActiveState") or "?", props.get("SubState") or "?")]
    if props.get("UnitFileState"):
        parts.append(props["UnitFileState"])
    return ", ".join(parts)


def _order(name):
    """Timers first (a timer left running would start its service again), then by name."""
    return (not name.endswith(".timer"), name)


def plan(units, package_units, present_paths, marked_conffiles):
    """The leftovers of a component on a host.

    ``units``: {name: props} of the component's own units; ``package_units``:
    {name: props} of the distribution units it configured; ``present_paths``:
    the component's own paths that exist; ``marked_conffiles``: the package
    configuration files whose content carries the component's marker.

    Returns ``{"ours": bool, "units": [{name, actions, found, package}], "paths": [...]}``,
    units (timers first) and paths sorted, so that a plan is the same on every run.
    """
    paths = sorted(set(present_paths or []) | set(marked_conffiles or []))
    ours = bool(paths)
    rows = []
    for name in sorted(units or {}, key=_order):
        actions = unit_actions(units[name])
        if actions:
            rows.append(dict(name=name, actions=actions, found=unit_found(units[name]), package=False))
    if ours:
        for name in sorted(package_units or {}, key=_order):
            actions = unit_actions(package_units[name])
            if actions:
                rows.append(dict(name=name, actions=actions,
                                 found=unit_found(package_units[name]) + " with llmops config", package=True))
    return dict(ours=ours or bool(rows), units=rows, paths=paths)


def is_empty(p):
    return not (p or {}).get("units") and not (p or {}).get("paths")


def describe(p):
    """One line per leftover: ``stop, disable haproxy.service (active (running), enabled with llmops config)``."""
    lines = ["%s %s (%s)" % (", ".join(u["actions"]), u["name"], u["found"]) for u in (p or {}).get("units") or []]
    lines.extend("remove %s" % path for path in (p or {}).get("paths") or [])
    return lines


def leftover_components(host, groups, component_groups):
    """The components whose leftovers a host must not have: those whose groups it is in none of.

    ``component_groups``: {component: [groups]}; an empty list means the
    component is not wanted anywhere (every host is checked for it).
    """
    groups = groups or {}
    out = []
    for component in sorted(component_groups or {}):
        if not any(host in (groups.get(g) or []) for g in component_groups[component] or []):
            out.append(component)
    return out


def leftover_rows(host, component, groups_named, p):
    """Drift rows (``<component>_leftover``) of a plan on a host outside the component's groups."""
    where = " or ".join("`%s`" % g for g in groups_named or []) or "(none: the component is not configured)"
    expected = "absent (%s is not in %s)" % (host, where)
    rows = [dict(host=host, component="%s_leftover" % component, instance=None, path=u["name"],
                 expected=expected, found=u["found"], detail=[]) for u in (p or {}).get("units") or []]
    rows.extend(dict(host=host, component="%s_leftover" % component, instance=None, path=path,
                     expected=expected, found="present", detail=[]) for path in (p or {}).get("paths") or [])
    return rows
