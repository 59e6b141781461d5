# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``systemctl show``: the one parser (and runner) the collection's modules use.

Pure Python (no Ansible imports). ``run`` is any callable ``argv -> (rc,
stdout, stderr)``: ``AnsibleModule.run_command`` fits, and so does a test stub
replaying a real capture (tests/fixtures/drift/systemctl-show-*.txt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def parse_show(text):
    """``KEY=VALUE`` lines of ``systemctl show`` into a dict (values stripped; '' kept).

    Only the first ``=`` splits (values such as ``ExecStart={ path=... }`` keep theirs);
    lines without ``=`` (blank separators) are skipped.
    """
    props = {}
    for line in (text or "").splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def show_argv(unit, props, systemctl="systemctl"):
    """``systemctl show UNIT -p A,B`` (props may be a list or a comma-separated string)."""
    if not isinstance(props, str):
        props = ",".join(props)
    return [systemctl or "systemctl", "show", unit, "-p", props]


def show(run, unit, props, systemctl="systemctl"):
    """Run ``systemctl show`` for one unit: ``(props dict, error)``.

    error is None on success; on failure (no systemd, no permission) the dict is
    empty and error holds the first line systemctl printed.
    """
    rc, out, err = run(show_argv(unit, props, systemctl))
    if rc != 0 and not (out or "").strip():
        text = (err or "").strip()
        return {}, (text.splitlines()[0] if text else "systemctl rc=%s" % rc)
    return parse_show(out), None


def int_prop(props, key):
    """An integer property (MainPID, NRestarts); None when missing or not a number."""
    try:
        return int(props.get(key))
    except (TypeError, ValueError):
        return None
