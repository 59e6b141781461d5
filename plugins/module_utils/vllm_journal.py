# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""What went wrong in a vLLM unit's journal: the lines of the last start that
failed, from its first error on, and the one line that names the cause.

Input is ``journalctl -u vllm@NAME -o cat`` text (the server's output plus
systemd's own lines about the unit). A failed start is followed by shutdown
noise (``nanobind: leaked ...``) and often by an automatic restart, so the
last N lines rarely hold the cause: this picks the start, then the error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# systemd's line at the beginning of every start of the unit (manual or automatic).
START_RE = re.compile(r"^Starting vllm@\S+")
# The first line that shows trouble (the excerpt starts a few lines before it).
TROUBLE_RE = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|\b\w*(Error|Exception): |: error: "
                        r"|vllm_warmup: FAILED|exited unexpectedly|Main process exited, code=(killed|dumped)"
                        r"|status=[1-9]\d*/|Failed with result")
# The line that names the cause, best first.
CAUSE_RES = (
    re.compile(r"\b[A-Za-z_][\w.]*(Error|Exception)\w*: \S.*$"),  # the root exception (first one raised;
    #                                                          NVMLError_InvalidArgument: too)
    re.compile(r": error: .*$"),                                 # argparse: unknown/invalid option
    # the ExecStartPost hook, unless it only echoes the main process's death ...
    re.compile(r"vllm_warmup: FAILED(?!.*main process.*\bgone\b).*$"),
    re.compile(r"(Main process exited|Failed with result).*$"),  # ... which systemd names better (code, signal)
    re.compile(r"vllm_warmup: FAILED.*$"),
)
NOISE_RE = re.compile(r"^(nanobind: | - leaked | - \.\.\. skipped|See https://nanobind)")
# vLLM's and uvicorn's own INFO/WARNING lines are never the trouble (they quote
# exception names in advice, e.g. "OSError: [Errno 24]" in the ulimit warning).
CALM_RE = re.compile(r"^(\(\w+ pid=\d+\) )?(INFO|WARNING|DEBUG)\b|^INFO: ")


# Traceback frames and code lines (indented after vLLM's log prefix, with or
# without its ERROR header: the API server prints bare tracebacks): left out,
# the exception line that ends the traceback stays.
FRAME_RE = re.compile(r"^(\(\w+ pid=\d+\) (ERROR \S+ \S+ \[[^\]]*\] )?)?\s+\S")


def _trouble(line):
    return not CALM_RE.match(line) and bool(TROUBLE_RE.search(line))


def starts(lines):
    """Split journal lines into starts (lists of lines); text before the first
    start line is a start of its own."""
    blocks = [[]]
    for line in lines:
        if START_RE.match(line) and blocks[-1]:
            blocks.append([])
        blocks[-1].append(line)
    return [b for b in blocks if b]


def cause(lines):
    """The line naming the cause (an exception, an option error, the hook's
    failure, systemd's exit), stripped of vLLM's log prefix; None if none."""
    for rx in CAUSE_RES:
        for line in lines:
            m = None if CALM_RE.match(line) else rx.search(line)
            if m:
                return m.group(0).strip()
    return None


def excerpt(text, max_lines=30, tail=5):
    """``{cause, lines, start_index, starts}`` of the last start that shows
    trouble (else the last start): up to ``max_lines`` lines from a few lines
    before its first error, shutdown noise dropped, then its last ``tail``
    lines (systemd's exit status)."""
    all_starts = starts([ln for ln in (text or "").splitlines() if not NOISE_RE.match(ln)])
    if not all_starts:
        return {"cause": None, "lines": [], "start_index": None, "starts": 0}
    idx = len(all_starts) - 1
    for i in range(len(all_starts) - 1, -1, -1):
        if any(_trouble(ln) for ln in all_starts[i]):
            idx = i
            break
    block = all_starts[idx]
    first = next((n for n, ln in enumerate(block) if _trouble(ln)), max(0, len(block) - max_lines))
    begin = max(0, first - 3)
    block = block[:begin] + [ln for ln in block[begin:] if not FRAME_RE.match(ln)]
    out = block[begin:begin + max_lines]
    rest = block[begin + max_lines:]
    if rest:
        skipped = len(rest) - min(tail, len(rest))
        if skipped:
            out.append("... (%d lines)" % skipped)
        out.extend(rest[-tail:])
    return {"cause": cause(block[first:]) or cause(block), "lines": out, "start_index": idx,
            "starts": len(all_starts)}


def failed_error(result):
    """The error of a failed task result (``ansible_failed_result``), in one line: its
    ``msg`` and, for a loop, the ``msg`` of each failed item, joined by ' / '."""
    result = result or {}
    msgs = [result.get("msg") or ""]
    for item in result.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            msgs.append(item.get("msg") or "")
    return " / ".join(str(m) for m in msgs if m)
