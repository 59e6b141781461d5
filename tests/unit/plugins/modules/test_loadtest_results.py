# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""loadtest_results module end to end on the real captures (exit_json/fail_json captured)."""
import json
import os

import pytest

from module_args import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import loadtest_results

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
EVALSCOPE = os.path.join(ROOT, "tests", "fixtures", "evalscope-1.14.1")
VBENCH = os.path.join(ROOT, "tests", "fixtures", "vllm-bench-0.32.0")


def run(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            loadtest_results.main()
    out = json.loads(capsys.readouterr().out)
    return exc.value.code, out


def test_evalscope_pass(capsys):
    rc, out = run({"tool": "evalscope", "path": EVALSCOPE, "slo": {"max_failed": 0, "p99_ttft_ms": 100},
                   "fail_on_slo": True, "meta": {"host": "n1"}}, capsys)
    assert rc == 0 and out["changed"] is False and out["found"] is True
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 4]
    assert out["slo"]["ok"] is True
    assert "- **host**: n1" in out["summary_markdown"]


def test_fail_on_slo_puts_table_in_msg(capsys):
    rc, out = run({"tool": "evalscope", "path": EVALSCOPE, "slo": {"p99_ttft_ms": 1}, "fail_on_slo": True}, capsys)
    assert rc == 1 and out["failed"] is True
    assert out["msg"].startswith("SLO not met (evalscope, ")
    assert "| 4 | p99 TTFT | 61.56 ms | <= 1.00 ms | FAIL |" in out["msg"]
    assert out["levels"]  # data still returned


def test_slo_failure_is_data_without_fail_on_slo(capsys):
    rc, out = run({"tool": "evalscope", "path": EVALSCOPE, "slo": {"p99_ttft_ms": 1}}, capsys)
    assert rc == 0 and out["slo"]["ok"] is False


def test_vllm_bench_dead_server(tmp_path, capsys):
    (tmp_path / "c2.json").write_text(open(os.path.join(VBENCH, "vllm-bench-dead-server.json")).read())
    rc, out = run({"tool": "vllm_bench", "path": str(tmp_path), "fail_on_slo": True}, capsys)
    assert rc == 1 and "successful requests | 0 | >= 1 | FAIL" in out["msg"]


def test_missing_folder_is_data(tmp_path, capsys):
    rc, out = run({"tool": "vllm_bench", "path": str(tmp_path / "nope")}, capsys)
    assert rc == 0 and out["found"] is False and out["slo"]["ok"] is False


def test_unknown_slo_key_fails_clearly(capsys):
    rc, out = run({"tool": "evalscope", "path": EVALSCOPE, "slo": {"p99_latency": 5}}, capsys)
    assert rc == 1 and "unknown SLO key(s) p99_latency" in out["msg"]
