# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters ``host_python_probe`` and ``host_python_problem`` (module_utils/host_python.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import host_python


def host_python_probe(interpreter, fallback=None):
    return host_python.probe_command(interpreter, fallback)


def host_python_problem(result, host, interpreter="", fallback=None):
    return host_python.problem(result, host, interpreter, fallback) or ""


class FilterModule(object):
    def filters(self):
        return dict(host_python_probe=host_python_probe, host_python_problem=host_python_problem)
