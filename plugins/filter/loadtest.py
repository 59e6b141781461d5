# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters over normalized load-test levels (see plugins/module_utils/loadtest/)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import loadtest


def _wrap(func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except loadtest.LoadTestError as e:
        raise AnsibleFilterError(str(e))


def loadtest_best(sweep, objective="output_throughput", concurrency=None):
    """Best value of a sweep (list of {value, levels}) for the objective."""
    return _wrap(loadtest.best_value, list(sweep or []), objective, concurrency)


def loadtest_sweep_table(sweep, option):
    """Markdown table: one row per swept value and concurrency level."""
    return _wrap(loadtest.render_sweep_table, option, list(sweep or []))


def loadtest_levels_table(levels):
    """Markdown table of normalized levels."""
    return _wrap(loadtest.render_levels_table, list(levels or []))


def loadtest_plot_data(levels_or_sweep, title, option=None, label=None):
    """Input for plot_loadtest.py: levels (x = concurrency) or, with option, a sweep (x = value)."""
    if option:
        return _wrap(loadtest.plot_data, title, sweep=list(levels_or_sweep or []), option=option)
    return _wrap(loadtest.plot_data, title, levels=list(levels_or_sweep or []), label=label)


def loadtest_api_plan(settings):
    """{api, tool, endpoint, ignore_eos} -> {api, tool, endpoint, backend, ignore_eos, wrapper} (checked)."""
    settings = settings or {}
    return _wrap(loadtest.load_plan, settings.get("api"), settings.get("tool"), settings.get("endpoint"),
                 settings.get("ignore_eos", True))


def loadtest_command(settings):
    """The load generator's argv from the verify role's settings (module_utils/loadtest/command.py)."""
    return _wrap(loadtest.load_command, dict(settings or {}))


def loadtest_run_problems(runs, run_timeout=None):
    """One line per load-generator run that timed out or exited non-zero."""
    problems = []
    for r in runs or []:
        rc = r.get("rc")
        label = r.get("item")
        where = " (concurrency %s)" % label[0] if isinstance(label, (list, tuple)) and label else ""
        if r.get("skipped"):
            continue
        if rc is None:
            problems.append("load generator did not report an exit code%s: %s" % (where, r.get("msg", "")))
        elif rc in (124, 137):
            problems.append("load generator killed after verify_run_timeout=%s s%s: server dead or hung?"
                            % (run_timeout, where))
        elif rc != 0:
            tail = [ln for ln in (r.get("stderr") or r.get("stdout") or "").splitlines() if ln.strip()]
            problems.append("load generator exited rc=%s%s: %s" % (rc, where, tail[-1].strip() if tail else "no output"))
    return problems


class FilterModule(object):
    def filters(self):
        return {
            "loadtest_best": loadtest_best,
            "loadtest_sweep_table": loadtest_sweep_table,
            "loadtest_levels_table": loadtest_levels_table,
            "loadtest_plot_data": loadtest_plot_data,
            "loadtest_run_problems": loadtest_run_problems,
            "loadtest_api_plan": loadtest_api_plan,
            "loadtest_command": loadtest_command,
        }
