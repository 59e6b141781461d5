"""The rollback's cause line on the real H200 journal (tests/fixtures/h200-site-2026-12-03).

The change pointed the instance at a GPU it may not open (CUDA_VISIBLE_DEVICES=7 on a
one-GPU host, under the unit's device policy): vLLM's NVML lookup raised
NVMLError_InvalidArgument, then the warmup hook reported the server gone. The capture is
journalctl's default format; the role reads `-o cat`, derived here by cutting the prefix.
"""
import os
import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_journal

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "h200-site-2026-12-03")
PREFIX = re.compile(r"^\w{3} \d\d \d\d:\d\d:\d\d \S+ [^:]+: ")


def failed_start():
    with open(os.path.join(FIX, "journal-vllm@tiny.txt")) as f:
        lines = [PREFIX.sub("", ln) for ln in f.read().splitlines()]
    first = next(i for i, ln in enumerate(lines) if "4504" in ln)
    start = max(i for i in range(first) if lines[i].startswith("Starting vllm@tiny.service"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("Failed to start vllm@tiny.service"))
    return "\n".join(lines[start:end + 1])


def test_the_cause_is_vllms_exception_not_the_hooks_echo():
    text = failed_start()
    assert text.startswith("Starting vllm@tiny.service")
    ex = vllm_journal.excerpt(text)
    assert ex["cause"] == "vllm.third_party.pynvml.NVMLError_InvalidArgument: Invalid Argument"
    assert any("NVMLError_InvalidArgument" in ln for ln in ex["lines"])


def test_the_failed_error_in_one_line():
    items = [{"failed": False, "msg": "ok"}, {"failed": True, "msg": "vllm@a: not ready after 600 s"}]
    loop = {"msg": "One or more items failed", "results": items}
    assert vllm_journal.failed_error(loop) == "One or more items failed / vllm@a: not ready after 600 s"
    assert vllm_journal.failed_error({"msg": "boom"}) == "boom" and vllm_journal.failed_error(None) == ""
