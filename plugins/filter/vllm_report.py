# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``vllm_report_rows``: the fleet report's rows; ``vllm_report_table``: its console table (never a ``None`` cell)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_report_table as report_table


def vllm_report_table(rows):
    """Report rows (playbooks/report.yml) -> the table's lines, header first."""
    return report_table.table_lines(list(rows or []))


def vllm_report_rows(reads, host, ready=None, nodes_health=None, not_installed=None):
    """vllm_report's ``instances`` -> one report row each; with ``not_installed`` (the venv's python that does not
    exist), the instance view -> one ``not-installed`` row each."""
    if not_installed:
        return report_table.not_installed_rows(host, list(reads or []), not_installed)
    return report_table.report_rows(host, list(reads or []), ready or {}, nodes_health or {})


class FilterModule(object):
    def filters(self):
        return {"vllm_report_rows": vllm_report_rows, "vllm_report_table": vllm_report_table}
