#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: leftovers
short_description: Find, and remove, what a component of the collection left on a host (units, configs, key files)
version_added: "0.1.0"
description:
  - The engine of the roles' C(remove) entry points (C(playbooks/decommission.yml)) and of the
    drift report's leftover rows (C(playbooks/drift.yml)). One rule for both, in
    C(plugins/module_utils/removal.py).
  - Reads the state of O(units) and O(package_units) with C(systemctl show), which of O(paths)
    exist, and which O(conffiles) carry their marker. A unit of our own is a leftover while it is
    active, failed or enabled; a package unit (C(haproxy.service)) only while one of the component's
    paths or marked configuration files is still there (otherwise it is the operator's, not ours).
  - Without check mode it stops, disables and resets (failed) those units, deletes the paths
    (files or whole directories), then reloads systemd when a unit file went. A second run finds
    nothing and reports C(changed=false). In check mode it changes nothing and returns the same
    plan, so C(changed) means "something would be removed"; a host that never had the component
    (no systemd unit, no file) is fine in both modes.
  - Returns paths and unit names only, never file contents (the env files hold API keys).
options:
  units:
    description:
      - The component's own units. A name may hold C(*) (C(vllm@*.service)), which matches the loaded
        units (C(systemctl list-units --all)) and those enabled through a C(*.wants) link.
    type: list
    elements: str
    default: []
  package_units:
    description: Units of a distribution package the component configured (C(haproxy.service)); see above.
    type: list
    elements: str
    default: []
  paths:
    description: The component's own files and directories; a path may be a shell glob (C(/etc/vllm/*.env)).
    type: list
    elements: path
    default: []
  conffiles:
    description: Package configuration files the component overwrote; removed only when their content matches C(marker).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      marker:
        description: A Python regular expression (multiline) our version of the file matches.
        type: str
        required: true
  unit_dir:
    description: Where the C(*.wants) links of enabled units are (for O(units) patterns).
    type: path
    default: /etc/systemd/system
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Remove the gateway's units and files
  llmops.serving.leftovers:
    package_units: [haproxy.service]
    paths: [/etc/haproxy/llmops, /etc/systemd/system/haproxy.service.d/10-llmops.conf]
    conffiles:
      - {path: /etc/haproxy/haproxy.cfg, marker: 'llmops\.serving gateway'}
"""

RETURN = r"""
leftovers:
  description: The plan, before it was applied (C(ours), C(units) with C(name), C(actions), C(found), C(paths)).
  returned: always
  type: dict
lines:
  description: One line per leftover (C(stop, disable haproxy.service (active (running), enabled with llmops config)), C(remove PATH)).
  returned: always
  type: list
  elements: str
"""

import fnmatch
import glob
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import removal


def _expand_units(module, patterns, unit_dir):
    names = []
    for pattern in patterns:
        if "*" not in pattern:
            names.append(pattern)
            continue
        rc, out, _err = module.run_command(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--full", pattern])
        if rc == 0:
            names.extend(line.split()[0] for line in out.splitlines() if line.split())
        for link in glob.glob(os.path.join(unit_dir, "*.wants", pattern)):
            names.append(os.path.basename(link))
    return sorted(set(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)))


def _show(module, names):
    if not names:
        return {}
    rc, out, err = module.run_command(["systemctl", "show", "-p", removal.SHOW_PROPS, "--"] + names)
    if rc != 0 and not out.strip():
        module.fail_json(msg="systemctl show failed: %s" % (err.strip().splitlines() or ["rc=%s" % rc])[0])
    return removal.parse_show_blocks(out)


def _existing(pattern):
    """The paths a pattern names that exist (a glob, or one path; a dangling link counts)."""
    if any(ch in pattern for ch in "*?["):
        return glob.glob(pattern)
    return [pattern] if os.path.lexists(pattern) else []


def _marked(path, marker):
    try:
        with open(path, "r", errors="replace") as f:
            return re.search(marker, f.read(), re.MULTILINE) is not None
    except (IOError, OSError):
        return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", default=[]),
            package_units=dict(type="list", elements="str", default=[]),
            paths=dict(type="list", elements="path", default=[]),
            conffiles=dict(type="list", elements="dict", default=[],
                           options=dict(path=dict(type="path", required=True), marker=dict(type="str", required=True))),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for c in p["conffiles"]:
        try:
            re.compile(c["marker"])
        except re.error as e:
            module.fail_json(msg="conffiles: marker of %s is not a regular expression (%s); fix the role's remove spec"
                             % (c["path"], e))
    has_systemd = module.get_bin_path("systemctl") is not None and os.path.isdir("/run/systemd/system")
    units = _show(module, _expand_units(module, p["units"], p["unit_dir"])) if has_systemd else {}
    package_units = _show(module, list(p["package_units"])) if has_systemd else {}
    present = sorted(set(m for pattern in p["paths"] for m in _existing(pattern)))
    marked = [c["path"] for c in p["conffiles"] if _marked(c["path"], c["marker"])]
    plan = removal.plan(units, package_units, present, marked)
    changed = not removal.is_empty(plan)
    result = dict(changed=changed, leftovers=plan, lines=removal.describe(plan))
    if module.check_mode or not changed:
        module.exit_json(**result)

    for unit in plan["units"]:
        for action in unit["actions"]:
            rc, _out, err = module.run_command(["systemctl", action, unit["name"]])
            if rc != 0:
                module.fail_json(msg="systemctl %s %s failed: %s" % (action, unit["name"], err.strip()), **result)
    for path in plan["paths"]:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    if has_systemd and (plan["units"] or any(path.startswith(p["unit_dir"] + "/") for path in plan["paths"])):
        module.run_command(["systemctl", "daemon-reload"], check_rc=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
