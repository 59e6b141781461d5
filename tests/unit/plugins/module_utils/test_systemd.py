# -*- coding: utf-8 -*-
"""systemd.parse_show / show on real `systemctl show` captures (tests/fixtures/drift)."""
import os

import pytest

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils.drift import rows as drift_rows
from ansible_collections.llmops.serving.plugins.module_utils import systemd
from ansible_collections.llmops.serving.plugins.module_utils import vllm_client as vc


def capture(name):
    with open(os.path.join(FIXTURES, "drift", "systemctl-show-%s.txt" % name)) as f:
        return f.read()


@pytest.mark.parametrize("name, load, active, sub, ufs, pid", [
    ("active", "loaded", "active", "running", "enabled", 1915),
    ("not-found", "not-found", "inactive", "dead", "", 0),
    ("stopped-disabled", "loaded", "inactive", "dead", "disabled", 0),
])
def test_parse_show_real_captures(name, load, active, sub, ufs, pid):
    p = systemd.parse_show(capture(name))
    assert (p["LoadState"], p["ActiveState"], p["SubState"], p["UnitFileState"]) == (load, active, sub, ufs)
    assert systemd.int_prop(p, "MainPID") == pid
    # empty values stay '' (ExecMainStartTimestamp= on a unit that never ran)
    assert p["ExecMainStartTimestamp"] == ("Mon 2026-11-30 01:49:37 UTC" if name == "active" else "")


def test_parse_show_splits_on_first_equals_only():
    p = systemd.parse_show("ExecStart={ path=/opt/vllm/venv/bin/python ; argv[]=python -m x ; }\n\nEnvironment=A=1 B=2\n")
    assert p["ExecStart"].startswith("{ path=/opt/vllm") and p["Environment"] == "A=1 B=2"
    assert systemd.int_prop({"MainPID": ""}, "MainPID") is None


def test_show_runner_and_failure():
    seen = []

    def run(argv):
        seen.append(argv)
        return 0, capture("active"), ""
    props, error = systemd.show(run, "vllm@default.service", ["ActiveState", "MainPID"], "/usr/bin/systemctl")
    assert seen == [["/usr/bin/systemctl", "show", "vllm@default.service", "-p", "ActiveState,MainPID"]]
    assert error is None and props["ActiveState"] == "active"
    props, error = systemd.show(lambda argv: (1, "", "System has not been booted with systemd as init\nmore"),
                                "x.service", "MainPID")
    assert props == {} and error == "System has not been booted with systemd as init"


def test_every_reader_uses_the_one_parser():
    """drift rows and vllm_client's unit dict agree with parse_show on the same capture."""
    text = capture("stopped-disabled")
    rows = drift_rows.service_rows("h", "vllm@a.service", text)
    assert {r["component"] for r in rows} == {"service_active", "service_enabled"}
    u = vc.parse_systemctl_show(text)
    assert u["active_state"] == "inactive" and u["main_pid"] == 0 and u["known"] is True
    u = vc.unit_state("vllm@a.service", runner=lambda argv: (0, capture("not-found"), ""))
    assert u["known"] is False and u["load_state"] == "not-found" and u["error"] is None
