# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""loadtest.py on the real EvalScope 1.14.1 and vllm bench 0.32.0 captures."""
import json
import os
import shutil

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import loadtest as lt

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
EVALSCOPE = os.path.join(ROOT, "tests", "fixtures", "evalscope-1.14.1")
VBENCH = os.path.join(ROOT, "tests", "fixtures", "vllm-bench-0.32.0")


def _vbench(name="vllm-bench-random.json"):
    with open(os.path.join(VBENCH, name)) as f:
        return json.load(f)


def test_evalscope_two_levels_normalized():
    levels = lt.load_results("evalscope", EVALSCOPE)
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    c4 = levels[1]
    assert set(c4) == set(lt.LEVEL_KEYS)
    assert c4["tool"] == "evalscope"
    assert (c4["requests"], c4["completed"], c4["failed"]) == (16, 16, 0)
    assert c4["request_throughput"] == pytest.approx(21.0929)
    assert c4["output_throughput"] == pytest.approx(337.4857)
    assert c4["ttft_mean_ms"] == pytest.approx(42.29)
    assert c4["ttft_p50_ms"] == pytest.approx(47.5989)
    assert c4["ttft_p99_ms"] == pytest.approx(61.5598)
    assert c4["tpot_p99_ms"] == pytest.approx(13.2044)
    assert c4["itl_p99_ms"] == pytest.approx(18.0567)
    # Latency (s) in the percentile file -> ms
    assert c4["e2el_p99_ms"] == pytest.approx(198.1)
    assert c4["e2el_mean_ms"] == pytest.approx(188.2)
    assert c4["source"].endswith("parallel_4_number_16/benchmark_summary.json")


def test_evalscope_matches_its_own_text_report():
    # performance_summary.txt (same run) prints RPS 9.17 / 21.09 and p99 TTFT 33.19 / 61.56
    levels = lt.load_results("evalscope", EVALSCOPE)
    assert [round(lv["request_throughput"], 2) for lv in levels] == [9.17, 21.09]
    assert [round(lv["ttft_p99_ms"], 2) for lv in levels] == [33.19, 61.56]


def test_evalscope_level_without_summary_counts_as_failed(tmp_path):
    # A dead server: EvalScope 1.14.1 leaves parallel_1_number_4/ with no summary and exits 1.
    (tmp_path / "tiny" / "parallel_1_number_4").mkdir(parents=True)
    levels = lt.load_results("evalscope", str(tmp_path))
    assert levels[0]["concurrency"] == 1 and levels[0]["failed"] == 4 and levels[0]["completed"] == 0
    verdict = lt.evaluate_slo(levels, {})
    assert not verdict["ok"]
    assert "successful requests" in verdict["table"]


def test_vllm_bench_normalized():
    lv = lt.normalize_vllm_bench(_vbench(), source="x.json")
    assert set(lv) == set(lt.LEVEL_KEYS)
    assert (lv["concurrency"], lv["requests"], lv["completed"], lv["failed"]) == (4, 16, 16, 0)
    assert lv["request_throughput"] == pytest.approx(22.067956722451942)
    assert lv["output_throughput"] == pytest.approx(353.0873075592311)
    assert lv["ttft_p50_ms"] == pytest.approx(56.28539750023265)
    assert lv["ttft_p99_ms"] == pytest.approx(75.23723004956082)
    assert lv["tpot_p99_ms"] == pytest.approx(10.0887248099995)
    assert lv["itl_p99_ms"] == pytest.approx(17.080703599640394)
    assert lv["e2el_p99_ms"] == pytest.approx(201.4121557501312)


def test_vllm_bench_dead_server_has_no_latencies():
    lv = lt.normalize_vllm_bench(_vbench("vllm-bench-dead-server.json"))
    assert (lv["completed"], lv["failed"]) == (0, 8)
    assert lv["ttft_p99_ms"] is None and lv["e2el_p99_ms"] is None  # not the 0.0 it writes
    verdict = lt.evaluate_slo([lv], {"p99_ttft_ms": 1000})
    assert not verdict["ok"]
    metrics = [(r["metric"], r["ok"]) for r in verdict["rows"]]
    assert ("successful requests", False) in metrics and ("p99 TTFT", False) in metrics


def test_vllm_bench_folder_sorted_by_concurrency(tmp_path):
    a = _vbench()
    b = dict(a, max_concurrency=1)
    (tmp_path / "c4.json").write_text(json.dumps(a))
    (tmp_path / "c1.json").write_text(json.dumps(b))
    (tmp_path / "other.json").write_text(json.dumps({"not": "a result"}))
    assert [lv["concurrency"] for lv in lt.load_results("vllm_bench", str(tmp_path))] == [1, 4]


def test_both_tools_same_shape():
    e = lt.load_results("evalscope", EVALSCOPE)[1]
    v = lt.normalize_vllm_bench(_vbench())
    assert set(e) == set(v)


def test_slo_pass_table():
    levels = lt.load_results("evalscope", EVALSCOPE)
    verdict = lt.evaluate_slo(levels, {"max_failed": 0, "p99_ttft_ms": 100, "p99_tpot_ms": 50,
                                       "p99_itl_ms": 50, "min_output_throughput": 100})
    assert verdict["ok"] is True
    assert len(verdict["rows"]) == 2 * 5
    assert verdict["table"].splitlines()[0] == "| concurrency | metric | measured | target | result |"
    assert "| 4 | p99 TTFT | 61.56 ms | <= 100.00 ms | ok |" in verdict["table"]


def test_slo_fail_names_the_metric_and_level():
    levels = lt.load_results("evalscope", EVALSCOPE)
    verdict = lt.evaluate_slo(levels, {"p99_ttft_ms": 50, "min_output_throughput": 200})
    assert verdict["ok"] is False
    failed = [(r["concurrency"], r["metric"]) for r in verdict["rows"] if not r["ok"]]
    # c1: p99 TTFT 33.19 ok, 146.7 tok/s < 200 fails; c4: 61.56 > 50 fails, 337 tok/s ok
    assert failed == [(1, "output throughput"), (4, "p99 TTFT")]
    assert "| 4 | p99 TTFT | 61.56 ms | <= 50.00 ms | FAIL |" in verdict["table"]
    assert "| 1 | output throughput | 146.70 tok/s | >= 200.00 tok/s | FAIL |" in verdict["table"]


def test_slo_failed_requests_counted():
    lv = dict(lt.normalize_vllm_bench(_vbench()), failed=2)
    verdict = lt.evaluate_slo([lv], {"max_failed": 0})
    assert not verdict["ok"]
    assert "| 4 | failed requests | 2 | <= 0 | FAIL |" in verdict["table"]


def test_slo_no_results_fails():
    verdict = lt.evaluate_slo([], {})
    assert verdict["ok"] is False and verdict["rows"][0]["metric"] == "results"


def test_slo_rejects_unknown_key_with_the_valid_ones():
    with pytest.raises(lt.LoadTestError, match="p99_ttf.*valid keys: max_failed"):
        lt.evaluate_slo([], {"p99_ttf": 3})
    with pytest.raises(lt.LoadTestError, match="must be a number"):
        lt.clean_slo({"p99_ttft_ms": "fast"})
    assert lt.clean_slo({"p99_ttft_ms": None, "max_failed": 0}) == {"max_failed": 0.0}


def test_unknown_tool():
    with pytest.raises(lt.LoadTestError, match="evalscope, vllm_bench"):
        lt.load_results("locust", EVALSCOPE)


def test_bad_json_is_reported(tmp_path):
    d = tmp_path / "parallel_1_number_2"
    d.mkdir()
    (d / "benchmark_summary.json").write_text("{not json")
    with pytest.raises(lt.LoadTestError, match="not valid JSON"):
        lt.load_results("evalscope", str(tmp_path))


def test_summary_markdown():
    levels = lt.load_results("evalscope", EVALSCOPE)
    verdict = lt.evaluate_slo(levels, {"p99_ttft_ms": 50})
    md = lt.render_summary(levels, verdict, {"host": "node1", "tool": "evalscope"})
    assert md.startswith("# Load test report")
    assert "- **host**: node1" in md
    assert "## SLO: FAIL" in md
    assert "| 4 | 16 | 0 | 21.09 | 337.49 |" in md


def test_best_value_max_throughput_and_min_ttft():
    base = lt.normalize_vllm_bench(_vbench())
    sweep = [
        {"value": 512, "levels": [dict(base, output_throughput=300.0, ttft_p99_ms=90.0)]},
        {"value": 2048, "levels": [dict(base, output_throughput=350.0, ttft_p99_ms=95.0)]},
        {"value": 8192, "levels": [dict(base, output_throughput=999.0, failed=1)]},  # failures never win
    ]
    best = lt.best_value(sweep, "output_throughput")
    assert best["value"] == 2048 and best["measured"] == 350.0
    assert lt.best_value(sweep, "ttft_p99_ms")["value"] == 512
    assert lt.best_value([{"value": 1, "levels": []}])["value"] is None
    with pytest.raises(lt.LoadTestError, match="objective"):
        lt.best_value(sweep, "latency")
    table = lt.render_sweep_table("max_num_batched_tokens", sweep)
    assert table.splitlines()[0].startswith("| max_num_batched_tokens | conc. |")
    assert len(table.splitlines()) == 2 + 3


def test_pick_level_by_concurrency():
    levels = lt.load_results("evalscope", EVALSCOPE)
    assert lt.pick_level(levels)["concurrency"] == 4
    assert lt.pick_level(levels, 1)["concurrency"] == 1
    assert lt.pick_level(levels, 3) is None


def test_fixture_tree_copied_from_shared_is_readable(tmp_path):
    # the loader finds levels at any depth (EvalScope adds <model>/ below --outputs-dir)
    shutil.copytree(os.path.join(EVALSCOPE, "parallel_1_number_8"), str(tmp_path / "tiny" / "parallel_1_number_8"))
    assert [lv["concurrency"] for lv in lt.load_results("evalscope", str(tmp_path))] == [1]
