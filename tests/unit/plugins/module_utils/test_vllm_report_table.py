# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report's console table (plugins/module_utils/vllm_report_table.py): no cell reads None."""
import glob
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_report_table as t
from ansible_collections.llmops.serving.plugins.module_utils import vllm_watchdog

from conftest import FIXTURES

# What vllm_health returns without a watchdog state file.
NO_WATCHDOG = vllm_watchdog.summary(None)
NOT_INSTALLED = dict(host="node1", instance="default", url="http://127.0.0.1:8000", state="not-installed",
                     version=None, model="tiny", max_model_len=None, unit={}, kv_cache_size_tokens=None,
                     kv_cache_predicted_tokens=None, restarts={}, watchdog={}, kv_cache_max_concurrency=None,
                     kv_cache_usage_perc=None, warm_ttft_p50_s=None, ready_after_s=None, first_request_s=None,
                     nodes_down=[])


def cells(row):
    return dict(zip(t.COLUMNS, t.row_cells(row)))


def test_a_ready_instance_without_a_watchdog_has_a_dash_not_none_per_hour():
    row = dict(NOT_INSTALLED, state="ready", version="0.32.0", kv_cache_size_tokens=10912, kv_cache_max_concurrency=21.3,
               kv_cache_usage_perc=0.0, ready_after_s="38.0", first_request_s=0.412, warm_ttft_p50_s=0.021,
               restarts={"n_restarts": 0, "start_limit_hit": False, "watchdog_last_hour": None}, watchdog=NO_WATCHDOG)
    got = cells(row)
    assert got["WATCHDOG"] == "-" and got["RESTARTS"] == "0"
    assert (got["KV_TOKENS"], got["MAX_CONC"], got["USAGE"], got["READY_S"], got["FIRST_S"], got["TTFT_P50"]) == (
        "10912", "21.3x", "0.0%", "38.0", "0.412", "0.021s")


def test_watchdog_status_and_restarts_in_the_last_hour():
    wd = dict(NO_WATCHDOG, present=True, status="ok", restarts_last_hour=2)
    assert cells(dict(NOT_INSTALLED, watchdog=wd))["WATCHDOG"] == "ok 2/h"
    assert cells(dict(NOT_INSTALLED, restarts={"n_restarts": 5, "start_limit_hit": True}))["RESTARTS"] == "5 LIMIT"


@pytest.mark.parametrize("missing", [None, "", "None"])
def test_no_cell_ever_reads_none(missing):
    row = dict((k, missing) if k not in ("host", "instance", "state") else (k, v) for k, v in NOT_INSTALLED.items())
    for line in t.table_lines([row, NOT_INSTALLED, {}]):
        assert "None" not in line, line
    assert cells(row)["VERSION"] == "-" and cells(row)["READY_S"] == "-" and cells(row)["NODES_DOWN"] == "-"


def test_the_filter_renders_the_table():
    from ansible_collections.llmops.serving.plugins.filter.vllm_report import FilterModule
    lines = FilterModule().filters()["vllm_report_table"]([NOT_INSTALLED])
    assert lines == t.table_lines([NOT_INSTALLED]) and "not-installed" in lines[1]


def test_header_and_columns_line_up():
    lines = t.table_lines([NOT_INSTALLED])
    assert lines[0].split() == list(t.COLUMNS)
    assert len(lines[1].split()) == len(t.COLUMNS)


def test_the_reports_written_by_real_runs_print_without_none():
    """Real JSON reports of playbooks/report.yml (tests/fixtures/report/)."""
    paths = sorted(glob.glob(os.path.join(FIXTURES, "report", "report-*.json")))
    assert paths
    for path in paths:
        with open(path) as f:
            rows = [r for host_rows in json.load(f)["hosts"].values() for r in host_rows]
        lines = t.table_lines(rows)
        assert len(lines) == len(rows) + 1 and rows
        assert not any("None" in line for line in lines), lines


def test_a_crash_loop_the_watchdog_revived_shows_in_the_cell_and_names_its_cause():
    st = vllm_watchdog.new_state("a", 3, 3)
    rv = vllm_watchdog.Revive(2, 30, 60)
    for now in (1000, 1030, 1100):
        vllm_watchdog.decide(st, "dead", "x", False, now, 3, 3, unit_failed=True, revive=rv,
                             cause="vllm@a.service: Main process exited, code=dumped, status=4/ILL")
    wd = vllm_watchdog.summary(st, now=1200)
    row = dict(NOT_INSTALLED, host="n1", instance="a", watchdog=wd)
    assert cells(row)["WATCHDOG"] == "gave-up 0/h +2rv"
    lines = t.table_lines([row, dict(NOT_INSTALLED, watchdog=NO_WATCHDOG)])
    assert len(lines) == 4
    assert lines[-1] == ("a on n1: gave-up, revived 2 times in the last hour (max 2), next revival "
                         "1970-01-01T01:16:40Z; cause: vllm@a.service: Main process exited, code=dumped, status=4/ILL")
