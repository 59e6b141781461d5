# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters that pick the failed start and its cause out of a vLLM unit's journal,
and a failed task's error in one line (tasks/main.yml of the vllm_rollback role)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_journal


def vllm_journal_excerpt(text, max_lines=30):
    """``journalctl -u vllm@NAME -o cat`` text -> ``{cause, lines, start_index, starts}``
    (module_utils/vllm_journal.py: the last start that shows trouble, from its first error)."""
    if text is not None and not isinstance(text, str):
        raise AnsibleFilterError("vllm_journal_excerpt expects journal text (a string), got %s" % type(text).__name__)
    return vllm_journal.excerpt(text or "", max_lines=int(max_lines))


def vllm_failed_error(result):
    """``ansible_failed_result`` -> its error in one line (module_utils/vllm_journal.py ``failed_error``)."""
    if result is not None and not isinstance(result, dict):
        raise AnsibleFilterError("vllm_failed_error expects a task result (ansible_failed_result), got %s"
                                 % type(result).__name__)
    return vllm_journal.failed_error(result)


class FilterModule(object):
    def filters(self):
        return {"vllm_journal_excerpt": vllm_journal_excerpt, "vllm_failed_error": vllm_failed_error}
