# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""gpu_preflight_report gives what roles/gpu_preflight/tasks/checks.yml computed in Jinja before
(the report, the status line, the failing checks and the assert's message):
tests/fixtures/gpu-preflight/old-jinja-checks.json holds the old tasks' output (at 74ec1b9),
rendered once by ansible-playbook 2.19 on llmops_gpu facts parsed from the nvidia-smi captures
(tests/fixtures/nvidia-smi: h200, a100-80gb, driver-too-old, mixed, ecc-uncorrectable,
foreign-process) with the role's defaults and per-case overrides (its `report` was computed by this
tree's Python from the settings the old Jinja built: the old Jinja's own output is the status line, the
failing checks and the message)."""
import json
import os

import pytest
import yaml

from conftest import FIXTURES, ROOT
from ansible_collections.llmops.serving.plugins.filter.gpu import gpu_preflight_report

with open(os.path.join(FIXTURES, "gpu-preflight", "old-jinja-checks.json")) as fh:
    OLD = json.load(fh)
DEFAULTS = {}
for part in ("defaults", "vars"):
    with open(os.path.join(ROOT, "roles", "gpu_preflight", part, "main.yml")) as fh:
        DEFAULTS.update(yaml.safe_load(fh))


def report(v):
    v = dict(DEFAULTS, **v)
    return gpu_preflight_report(v["llmops_gpu"], {
        "host": "gpu01", "cuda_build": v["gpu_preflight_cuda_build"], "build_label": v["gpu_preflight_build_label"],
        "driver_table": v["gpu_preflight_driver_table_base"] + v["gpu_preflight_driver_table_extra"],
        "expect_gpu": v["gpu_preflight_expect_gpu"], "instances": v["_gpu_preflight_instances"],
        "predictions": v.get("_gpu_preflight_kv", {}).get("instances", []),
        "reserve_gib": v["gpu_preflight_reserve_gib"], "own_process_patterns": v["gpu_preflight_own_process_patterns"],
        "expect_mig": v["gpu_preflight_expect_mig"], "require_nvcc": v["gpu_preflight_require_nvcc"],
        "disk": v["gpu_preflight_disk"], "fail_on_warnings": v["gpu_preflight_fail_on_warnings"]})


@pytest.mark.parametrize("case", sorted(OLD))
def test_report_status_line_and_failing_message_are_the_old_jinja_ones(case):
    got, old = report(OLD[case]["vars"]), OLD[case]["out"]
    new_keys = ("summary", "failing", "failing_message")
    assert json.dumps(dict((k, v) for k, v in got.items() if k not in new_keys), sort_keys=True) == json.dumps(
        dict((k, v) for k, v in old["report"].items() if k not in new_keys), sort_keys=True)
    # The old summary line: "HOST: mode ... (FLASH_ATTN_CUDA_ARCHS=...); check=status, ..."
    assert old["summary"].split("); ", 1)[1] == got["summary"]
    assert got["failing"] == old["failing"]
    assert got["failing_message"] == old["fail_msg"]


def test_the_cases_cover_a_warning_that_fails_and_one_that_does_not():
    assert OLD["a100-warn-fails"]["out"]["failing"] == ["persistence"]
    assert OLD["a100-all-pass"]["out"]["failing"] == [] and OLD["a100-all-pass"]["out"]["fail_msg"] == ""


def test_a_reserve_that_is_not_a_number_is_named():
    v = dict(OLD["h200-defaults"]["vars"], gpu_preflight_reserve_gib="lots")
    with pytest.raises(Exception, match="gpu_preflight_reserve_gib must be a number"):
        report(v)
