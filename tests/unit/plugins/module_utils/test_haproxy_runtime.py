"""HAProxy runtime API parsing and the drain/ready decisions, on real HAProxy 2.6.12 answers
(tests/fixtures/haproxy/, captured from Debian bookworm's haproxy on its stats socket)."""
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import haproxy_runtime as hr

from conftest import FIXTURES

CAP = os.path.join(FIXTURES, "haproxy")


def cap(name):
    with open(os.path.join(CAP, name)) as f:
        return f.read()


class Replay(hr.Runtime):
    """Answers `show stat` with a sequence of real captures; records `set server` commands."""

    def __init__(self, *captures):
        hr.Runtime.__init__(self, "/nonexistent")
        self.captures = list(captures)
        self.sent = []

    def command(self, cmd):
        if cmd.startswith("show stat"):
            return cap(self.captures[0] if len(self.captures) == 1 else self.captures.pop(0))
        self.sent.append(cmd)
        return cap("set_server_unknown.txt") if "/nope " in cmd else "\n"


class Clock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_parse_real_show_stat():
    rows = hr.parse_show_stat(cap("show_stat_n1_down_n2_drain.csv"))
    assert [(r["backend"], r["server"], r["status"], r["scur"]) for r in rows] == [
        ("m_tiny", "n1__default", "DOWN", 0), ("m_tiny", "n2__default", "DRAIN", 0)]
    assert [hr.admin_state(r) for r in rows] == ["ready", "drain"]
    assert [hr.is_ready(r) for r in rows] == [False, False]


def test_drain_sets_the_state_when_another_server_is_ready():
    rt = Replay("show_stat_both_up.csv", "show_stat_both_up.csv", "show_stat_both_up.csv", "show_stat_n2_drain.csv")
    clock = Clock()
    res = hr.ServerState(rt, "n2__default", clock=clock, sleep=clock.sleep).apply("drain", timeout=10)
    assert rt.sent == ["set server m_tiny/n2__default state drain"]
    assert res["changed"] and res["backends"][0]["status"] == "DRAIN" and res["backends"][0]["sessions"] == 0


def test_drain_refuses_to_take_the_last_ready_server():
    rt = Replay("show_stat_n1_down_n2_drain.csv")
    clock = Clock()
    state = hr.ServerState(rt, "n1__default", clock=clock, sleep=clock.sleep)
    # n1 is DOWN (admin ready): draining it needs another ready server, n2 is drained.
    with pytest.raises(hr.HaproxyRuntimeError, match="without a ready server"):
        state.apply("drain", timeout=5)
    assert rt.sent == []


def test_ready_waits_for_health_up_and_times_out_naming_the_status():
    # n1 is DOWN: the wait for UP runs out.
    clock = Clock()
    rt = Replay("show_stat_n1_down_n2_drain.csv")
    with pytest.raises(hr.HaproxyRuntimeError, match="did not reach UP within 3 s: status DOWN"):
        hr.ServerState(rt, "n1__default", clock=clock, sleep=clock.sleep).apply("ready", timeout=3)
    # DOWN hides the admin state: `ready` is sent anyway (idempotent).
    assert rt.sent == ["set server m_tiny/n1__default state ready"]


def test_ready_after_drain_sets_ready():
    rt = Replay("show_stat_n2_drain.csv", "show_stat_both_up.csv")
    res = hr.ServerState(rt, "n2__default").apply("ready", timeout=5)
    assert rt.sent == ["set server m_tiny/n2__default state ready"] and res["backends"][0]["status"] == "UP"


def test_check_mode_sets_nothing():
    rt = Replay("show_stat_both_up.csv")
    res = hr.ServerState(rt, "n2__default").apply("drain", check_mode=True)
    assert res["changed"] and rt.sent == []


def test_unknown_server_is_data_not_a_failure():
    res = hr.ServerState(Replay("show_stat_both_up.csv"), "nope").apply("drain")
    assert not res["changed"] and "not in any backend" in res["unavailable"]


def test_an_error_answer_of_set_server_raises():
    rt = Replay("show_stat_both_up.csv")
    with pytest.raises(hr.HaproxyRuntimeError, match="No such server"):
        rt.set_state("m_tiny", "nope", "drain")


def test_draining_a_models_only_server_is_done_and_warned_naming_the_model():
    """A backend with one server (real capture: haproxy 2.6.12, backend m_solo, n1__default UP): the drain
    is not held up, the backend is listed as sole_server, and the warning names the server and the model."""
    rt = Replay("show_stat_sole_server.csv")
    clock = Clock()
    res = hr.ServerState(rt, "n1__default", clock=clock, sleep=clock.sleep).apply("drain", wait=False)
    assert rt.sent == ["set server m_solo/n1__default state drain"] and res["sole_server"] == ["m_solo"]
    warning = hr.sole_server_warning("n1__default", res["sole_server"])
    assert "n1__default" in warning and "model solo" in warning and "503" in warning
    assert hr.sole_server_warning("n2__default", []) is None
    # With another server ready (the both-up capture) nothing is sole, no warning.
    rt = Replay("show_stat_both_up.csv")
    res = hr.ServerState(rt, "n2__default", clock=clock, sleep=clock.sleep).apply("drain", wait=False)
    assert res["sole_server"] == [] and hr.sole_server_warning("n2__default", res["sole_server"]) is None
