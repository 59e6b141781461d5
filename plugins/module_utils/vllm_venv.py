# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The vllm_service role's venv rules: names, pruning, the CPU build's removals.

``paths(settings)``: versioned venvs are named PACKAGE-VERSION-HASH, HASH = the
first 8 hex digits of the sha1 of the package set (the pinned vLLM, the CPU
build's removed packages, the interpreter whose packages it inherits, the
sorted extra packages, joined by spaces). The base venv of a version has no
extra packages (clone source, adoption target); a venv over another
environment's packages is PACKAGE-VERSION-inherit-HASH (never a clone source
for one that is not).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

SETTINGS = ("venvs_dir", "venv", "package", "version", "device", "cpu_remove_packages", "inherit", "python",
            "extra_packages", "versioned")


def _sha8(words):
    return hashlib.sha1(" ".join(words).encode("utf-8")).hexdigest()[:8]


def paths(settings):
    """{'set', 'base', 'path'}: the package set, the version's base venv, the venv this run deploys."""
    missing = [k for k in SETTINGS if k not in settings]
    if missing:
        raise ValueError("the venv settings lack %s" % ", ".join(missing))
    pinned = "%s==%s" % (settings["package"], settings["version"])
    words = [pinned]
    if settings["device"] == "cpu":
        words += sorted("-%s" % p for p in settings["cpu_remove_packages"] or [])
    if settings["inherit"]:
        words.append("inherit:%s" % settings["python"])
    prefix = "%s/%s-%s-" % (settings["venvs_dir"], settings["package"], settings["version"])
    base = prefix + _sha8(words)
    extra = sorted(str(p) for p in settings["extra_packages"] or [])
    path = prefix + ("inherit-" if settings["inherit"] else "") + _sha8(words + extra)
    return {"set": words, "base": base, "path": path if settings["versioned"] else settings["venv"]}


def prune(found, in_use, keep):
    """The venv directories past ``keep`` (``found``: ansible.builtin.find's files), newest
    first by mtime; the one in use is never among them."""
    rest = sorted((f for f in found or [] if f["path"] != in_use), key=lambda f: f["mtime"], reverse=True)
    return [f["path"] for f in rest][max(int(keep) - 1, 0):]


def cpu_remove_needed(check, packages, versions):
    """Whether the CPU build's unwanted packages must be uninstalled: from the venv's own
    answer (``check``: the registered result of asking it; rc != 0 goes to pip, which knows
    best), else - when it was not asked - from the host state's versions of the venv."""
    check = check or {}
    if check.get("skipped"):
        return any((versions or {}).get(p) for p in packages or [])
    if check.get("rc", 1) != 0:
        return True
    return len(json.loads(check.get("stdout") or "[]")) > 0
