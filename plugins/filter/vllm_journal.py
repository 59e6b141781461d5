# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filter that picks the failed start and its cause out of a vLLM unit's journal
(tasks/rollback.yml of the vllm_service role)."""

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


class FilterModule(object):
    def filters(self):
        return {"vllm_journal_excerpt": vllm_journal_excerpt}
