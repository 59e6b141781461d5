# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Is there a Python for Ansible's modules on a host? Asked with ONE
``ansible.builtin.raw`` command before the first module runs (the playbooks'
first play on the hosts, ``gather_facts: false``), so a host without Python
gets a message that names it and the fix for its OS, instead of Ansible's
generic interpreter-discovery error.

``probe_command`` writes the shell command (the candidates Ansible itself
tries: ``ansible_python_interpreter`` when set, else its
INTERPRETER_PYTHON_FALLBACK list); ``problem`` reads its output.

Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from shlex import quote
except ImportError:  # pragma: no cover - Python 2
    from pipes import quote

# ansible-core 2.19's oldest target Python.
MIN_PYTHON = (3, 8)
AUTO = ("", "auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_PY_RE = re.compile(r"^PY=(\S+)(?:\s+(\d+)\.(\d+))?\s*$", re.M)
_OS_RE = re.compile(r"^OS=(.*)$", re.M)

# /etc/os-release ID / ID_LIKE -> the command that installs python3 there.
INSTALL = (
    (("debian", "ubuntu"), "apt-get update && apt-get install -y python3"),
    (("rhel", "fedora", "centos", "rocky", "almalinux", "amzn", "ol"), "dnf install -y python3"),
    (("suse", "opensuse", "sles", "opensuse-leap", "opensuse-tumbleweed"), "zypper install -y python3"),
    (("alpine",), "apk add python3"),
    (("arch",), "pacman -S --noconfirm python"),
)


def candidates(interpreter, fallback):
    """The interpreters Ansible would use: the set one, else its fallback list (in order)."""
    interpreter = str(interpreter or "").strip()
    if interpreter and interpreter not in AUTO and "{{" not in interpreter:
        return [interpreter]
    return [str(c) for c in fallback or ["python3", "/usr/bin/python3"]]


def probe_command(interpreter, fallback):
    """One POSIX sh command: the first candidate found and its version, and the OS ID."""
    names = " ".join(quote(c) for c in candidates(interpreter, fallback))
    return ("for p in %s; do if command -v \"$p\" >/dev/null 2>&1; then "
            "echo \"PY=$(command -v \"$p\") $(\"$p\" -c 'import sys; print(\"%%d.%%d\" %% sys.version_info[:2])' "
            "2>/dev/null)\"; break; fi; done; "
            "if [ -r /etc/os-release ]; then . /etc/os-release; echo \"OS=${ID:-} ${ID_LIKE:-}\"; fi; true" % names)


def install_command(os_ids):
    ids = [i.strip('"').lower() for i in str(os_ids or "").split()]
    for known, cmd in INSTALL:
        if any(i in known for i in ids):
            return cmd
    return None


def problem(result, host, interpreter, fallback):
    """None when the host has a usable Python, else the message (host, variable, fix for its OS).

    ``result``: the registered ``ansible.builtin.raw`` result (rc, stdout, msg).
    """
    result = result or {}
    out = str(result.get("stdout") or "")
    if result.get("unreachable"):
        return None  # Ansible says that itself, naming the host
    m = _PY_RE.search(out)
    os_m = _OS_RE.search(out)
    os_ids = os_m.group(1).strip() if os_m else ""
    cmd = install_command(os_ids)
    install = ("install python3 on it (`%s`%s)" % (cmd, ", as root" if not cmd.startswith("apk") else "")
               if cmd else "install python3 on it with its package manager")
    set_one = candidates(interpreter, fallback)
    explicit = len(set_one) == 1 and str(interpreter or "").strip() not in AUTO
    if result.get("rc") not in (0, None) and not m:
        detail = (str(result.get("msg") or "") or out or "no output")[:300]
        return ("host %s: the Python check (one `raw` command) failed with rc %s: %s. Ansible's modules need "
                "a POSIX shell and Python 3 there" % (host, result.get("rc"), detail))
    if not m:
        if explicit:
            return ("host %s: ansible_python_interpreter=%s is not on the host (not found by `command -v`): "
                    "Ansible's modules cannot run there. Fix: set ansible_python_interpreter to the path of a "
                    "Python %d.%d+ on %s (e.g. /usr/bin/python3), or %s"
                    % (host, set_one[0], MIN_PYTHON[0], MIN_PYTHON[1], host, install))
        return ("host %s has no Python (none of %s found): Ansible's modules cannot run there. Fix: %s, or set "
                "ansible_python_interpreter for %s to the path of a Python %d.%d+ it has"
                % (host, ", ".join(set_one), install, host, MIN_PYTHON[0], MIN_PYTHON[1]))
    path, major, minor = m.group(1), m.group(2), m.group(3)
    if major is not None and (int(major), int(minor)) < MIN_PYTHON:
        return ("host %s: %s is Python %s.%s; ansible-core needs %d.%d or newer on the hosts. Fix: %s, or set "
                "ansible_python_interpreter for %s to a Python %d.%d+ it has"
                % (host, path, major, minor, MIN_PYTHON[0], MIN_PYTHON[1], install, host,
                   MIN_PYTHON[0], MIN_PYTHON[1]))
    return None
