# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vllm_report_rows builds the rows playbooks/report.yml built in Jinja before, value for value:
tests/fixtures/report/old-jinja-rows.json holds the old tasks' rows ('Collect one row per
instance', both tasks, at 74ec1b9), rendered once by ansible-playbook 2.19 on the vllm_report
reads rebuilt from the two REAL reports (molecule drift fleet, H200) plus a not-ready instance, a
headless part, a spanning head with a node down, the readiness gate's latency and a host
without the venv. The JSON report (report_file: sort_keys, indent 4) and the console table
from the new rows are the old ones, byte for byte."""
import json
import os

import pytest

from conftest import FIXTURES
from ansible_collections.llmops.serving.plugins.filter.vllm_report import vllm_report_rows, vllm_report_table
from ansible_collections.llmops.serving.plugins.module_utils.vllm_report_table import ready_after_s

with open(os.path.join(FIXTURES, "report", "old-jinja-rows.json")) as fh:
    OLD = json.load(fh)


# Fields the rows gained after the Jinja tasks (none of these captures serves a LoRA adapter).
ADDED = {"lora_adapters": []}


def rows(host):
    i = OLD[host]["inputs"]
    if not i["_report_installed"]:
        out = vllm_report_rows(i["vllm_view"], host, not_installed=i["_report_python"])
    else:
        out = vllm_report_rows(i["_report_reads"]["instances"], host, i.get("vllm_ready", {}),
                               i.get("vllm_nodes_health", {}))
    for row in out:
        for key, value in ADDED.items():
            assert row.pop(key, value) == value, (host, key)
    return out


def report_text(per_host):
    return json.dumps({"hosts": per_host}, indent=4, sort_keys=True)


@pytest.mark.parametrize("host", sorted(OLD))
def test_rows_are_the_old_jinja_rows(host):
    assert report_text(rows(host)) == report_text(OLD[host]["rows"])


def test_the_json_report_and_the_table_are_byte_identical():
    new = dict((h, rows(h)) for h in sorted(OLD))
    old = dict((h, OLD[h]["rows"]) for h in sorted(OLD))
    assert report_text(new) == report_text(old)
    flat = [r for h in sorted(OLD) for r in new[h]]
    assert vllm_report_table(flat) == vllm_report_table([r for h in sorted(OLD) for r in old[h]])
    assert len(flat) == 8


def test_the_captures_cover_every_branch():
    all_rows = [r for h in OLD.values() for r in h["rows"]]
    states = set(r["state"] for r in all_rows)
    assert {"ready", "starting", "headless", "not-installed"} <= states
    assert any(r["nodes_down"] for r in all_rows)
    assert any(r["first_request_s"] == 0.1234 for r in all_rows)  # the readiness gate's latency


def test_ready_after_s_from_systemd_timestamps():
    assert ready_after_s({"active_enter_timestamp": "Thu 2026-12-03 10:06:56 UTC",
                          "exec_main_start_timestamp": "Thu 2026-12-03 10:04:51 UTC"}) == 125.0
    assert ready_after_s({"active_enter_timestamp": "", "exec_main_start_timestamp": "Thu 2026-12-03 10:04:51 UTC"}) is None
    assert ready_after_s(None) is None
