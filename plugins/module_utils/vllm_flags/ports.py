# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Ports already bound by a process other than the instance's own vllm@NAME
(``ss -ltnp`` output, the unit of a pid from its cgroup).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import as_int, inst_path, problem

_SS_USERS = re.compile(r'\("([^"]*)",pid=(\d+),fd=\d+\)')
_WILDCARD = ("0.0.0.0", "::", "*", "")


def parse_ss_listeners(text):
    """Parse ``ss -Hltnp`` (or ``ss -ltnp``) output into listener dicts."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split()
        if not fields or fields[0] != "LISTEN" or len(fields) < 5:
            continue
        local = fields[3]
        addr, dummy, port = local.rpartition(":")
        if not port.isdigit():
            continue
        addr = addr.strip("[]")
        if "%" in addr:  # 127.0.0.1%lo
            addr = addr.split("%", 1)[0]
        users = _SS_USERS.findall(line)
        out.append({"address": addr, "port": int(port),
                    "pids": sorted(set(int(p) for dummy, p in users)),
                    "processes": sorted(set(n for n, dummy in users))})
    return out


def addresses_overlap(a, b):
    a = "" if a in _WILDCARD else a
    b = "" if b in _WILDCARD else b
    if a == "" or b == "":
        return True
    if a in ("localhost",):
        a = "127.0.0.1"
    if b in ("localhost",):
        b = "127.0.0.1"
    return a == b


def unit_of_pid(pid, proc_root="/proc"):
    """The systemd unit a process runs in (from its cgroup), or None."""
    try:
        with open("%s/%d/cgroup" % (proc_root, pid)) as f:
            text = f.read()
    except (IOError, OSError):
        return None
    for line in text.splitlines():
        for part in line.rsplit(":", 1)[-1].split("/"):
            if part.endswith(".service"):
                return part
    return None


def check_ports(instances, listeners, own_unit_of_pid, unit_main_pids):
    """Ports bound by a process other than the instance's own unit.

    ``instances``: the instance view's entries (``name``, ``host``, ``port``,
    ``unit``), in the order of vllm_instances; ``listeners``: from parse_ss_listeners; ``own_unit_of_pid``: pid -> unit
    name or None; ``unit_main_pids``: instance name -> MainPID (0 = not running).
    """
    problems = []
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            continue
        try:
            port = as_int(inst.get("port", 8000))
        except (TypeError, ValueError):
            continue
        host = str(inst.get("host", "127.0.0.1"))
        unit = inst.get("unit")
        for lst in listeners:
            if lst["port"] != port or not addresses_overlap(lst["address"], host):
                continue
            main_pid = unit_main_pids.get(inst.get("name")) or 0
            if lst["pids"]:
                others = [p for p in lst["pids"] if p != main_pid and own_unit_of_pid(p) != unit]
                if not others:
                    continue
                who = ", ".join("pid %d (%s)" % (p, own_unit_of_pid(p) or "no unit") for p in others)
            else:
                if main_pid:
                    # Owner unknown (no permission to see it) and our unit runs: assume ours.
                    continue
                who = "an unknown process"
            problems.append(problem(inst_path(i, "port"), "--port", "port",
                                    "%s: port %d on %s is already bound by %s, not by %s; choose a free "
                                    "port or stop that process" % (inst_path(i, "port"), port,
                                                                   lst["address"] or "*", who, unit)))
            break
    return problems
