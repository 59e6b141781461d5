# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``vllm_report_table``: the fleet report's console table (never a ``None`` cell)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_report_table as report_table


def vllm_report_table(rows):
    """Report rows (playbooks/report.yml) -> the table's lines, header first."""
    return report_table.table_lines(list(rows or []))


class FilterModule(object):
    def filters(self):
        return {"vllm_report_table": vllm_report_table}
