# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Drift rows of the venv a running vLLM instance uses (``venv_in_use``: restart pending)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.llmops.serving.plugins.module_utils.drift.rows import item_name


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
            rows.append(dict(host=host, component="venv_in_use", instance=item_name(res), path=argv0,
                             expected=venv, found=found + " (restart pending)", detail=[]))
    return rows
