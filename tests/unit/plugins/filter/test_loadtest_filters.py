# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""loadtest filters and the controller plot script, on the real captures."""
import json
import os
import subprocess
import sys

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter import loadtest as f
from ansible_collections.llmops.serving.plugins.module_utils import loadtest as lt

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
EVALSCOPE = os.path.join(ROOT, "tests", "fixtures", "evalscope-1.14.1")
PLOT = os.path.join(ROOT, "roles", "verify", "files", "plot_loadtest.py")


def _sweep():
    levels = lt.load_results("evalscope", EVALSCOPE)
    # made from the capture: the second value with 10 % less throughput at c4
    slower = [dict(lv, output_throughput=lv["output_throughput"] * 0.9) for lv in levels]
    return [{"value": 512, "levels": levels}, {"value": 2048, "levels": slower}]


def test_filters_registered():
    assert set(f.FilterModule().filters()) == {"loadtest_best", "loadtest_sweep_table", "loadtest_run_problems",
                                               "loadtest_levels_table", "loadtest_plot_data", "loadtest_api_plan",
                                               "loadtest_command"}


def test_best_and_errors():
    assert f.loadtest_best(_sweep())["value"] == 512
    assert f.loadtest_best(_sweep(), "output_throughput", 1)["concurrency"] == 1
    with pytest.raises(AnsibleFilterError, match="objective must be one of"):
        f.loadtest_best(_sweep(), "p50")


def test_plot_data_shapes():
    levels = lt.load_results("evalscope", EVALSCOPE)
    d = f.loadtest_plot_data(levels, "n1", label="evalscope")
    assert d["x_label"] == "concurrency" and [p["x"] for p in d["series"][0]["points"]] == [1, 4]
    s = f.loadtest_plot_data(_sweep(), "sweep", option="max_num_batched_tokens")
    assert s["x_label"] == "max_num_batched_tokens"
    assert [x["label"] for x in s["series"]] == ["concurrency 1", "concurrency 4"]
    assert [p["x"] for p in s["series"][1]["points"]] == [512, 2048]


@pytest.mark.parametrize("sweep", [False, True])
def test_plot_script_writes_png(tmp_path, sweep):
    pytest.importorskip("matplotlib")
    levels = lt.load_results("evalscope", EVALSCOPE)
    data = (f.loadtest_plot_data(_sweep(), "t", option="max_num_seqs") if sweep
            else f.loadtest_plot_data(levels, "t"))
    src = tmp_path / "d.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "p.png"
    subprocess.run([sys.executable, PLOT, str(src), str(out)], check=True)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_run_problems():
    runs = [
        {"rc": 0, "stdout": "ok"},
        {"rc": 124, "item": [4, 16]},
        {"rc": 1, "stderr": "Traceback...\nTimeoutError: Test connection failed\n"},
        {"skipped": True},
    ]
    assert f.loadtest_run_problems(runs, 600) == [
        "load generator killed after verify_run_timeout=600 s (concurrency 4): server dead or hung?",
        "load generator exited rc=1: TimeoutError: Test connection failed",
    ]


def test_api_plan_filter_names_the_variable():
    from ansible.errors import AnsibleFilterError
    plan = f.FilterModule().filters()["loadtest_api_plan"]
    assert plan({"api": "anthropic", "tool": "vllm_bench", "endpoint": "", "ignore_eos": True})["endpoint"] == "/v1/messages"
    with pytest.raises(AnsibleFilterError, match="verify_tool=evalscope cannot drive the anthropic API"):
        plan({"api": "anthropic", "tool": "evalscope", "endpoint": ""})
