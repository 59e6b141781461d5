# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parsing helpers of benchmarks/vllm_startup.py.

All inputs below are MADE strings in the real formats: `systemctl show -p ...` output of
systemd 252 and `journalctl -o json` lines of vllm@default.service (vLLM 0.32.0, Debian 12),
modelled on what the demo node printed; field values (cursors, ids, times) are edited.
"""
import importlib.util
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("vllm_startup", os.path.join(ROOT, "benchmarks", "vllm_startup.py"))
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)

# MADE: systemctl show vllm@default.service -p ... (systemd 252 prints properties in its own order)
SHOW = """MainPID=7433
Environment=HOME=/var/lib/vllm/default XDG_CACHE_HOME=/var/lib/vllm/default/cache/xdg \
HF_HOME=/var/lib/vllm/default/cache/hf VLLM_CACHE_ROOT=/var/lib/vllm/default/cache/vllm \
VLLM_ENGINE_READY_TIMEOUT_S=600
SubState=running
InactiveExitTimestampMonotonic=3508676618
InactiveEnterTimestampMonotonic=0
ExecMainStartTimestampMonotonic=3508676274
ActiveEnterTimestampMonotonic=3523182270
ActiveState=active
InvocationID=1b7ac39f4d814579b004c7373645a6be
"""

# MADE: journalctl -o json -u vllm@default.service _SYSTEMD_INVOCATION_ID=... (trimmed fields)
INV = "1b7ac39f4d814579b004c7373645a6be"
J_START = ('{"SYSLOG_IDENTIFIER":"vllm-default","_PID":"7433","_SYSTEMD_UNIT":"vllm@default.service",'
           '"_SYSTEMD_INVOCATION_ID":"%s","MESSAGE":"INFO:     Started server process [7433]",'
           '"__MONOTONIC_TIMESTAMP":"3522540000","__REALTIME_TIMESTAMP":"1796002904428871","_TRANSPORT":"stdout"}'
           % INV)
J_DONE = ('{"SYSLOG_IDENTIFIER":"vllm-default","_PID":"7433","_SYSTEMD_UNIT":"vllm@default.service",'
          '"_SYSTEMD_INVOCATION_ID":"%s","MESSAGE":"INFO:     Application startup complete.",'
          '"__MONOTONIC_TIMESTAMP":"3522543482","__REALTIME_TIMESTAMP":"1796002904432353","_TRANSPORT":"stdout"}'
          % INV)
# MADE: journald stores non-UTF-8 MESSAGE as a byte array
J_BYTES = ('{"_SYSTEMD_INVOCATION_ID":"%s","MESSAGE":[%s],"__MONOTONIC_TIMESTAMP":"5","__REALTIME_TIMESTAMP":"6"}'
           % (INV, ",".join(str(b) for b in b"\xffINFO:     Application startup complete.")))


def test_parse_systemctl_show():
    p = vs.parse_systemctl_show(SHOW)
    assert p["ActiveState"] == "active"
    assert p["InvocationID"] == INV
    assert vs.monotonic_us(p, "ExecMainStartTimestampMonotonic") == 3508676274
    assert vs.monotonic_us(p, "InactiveEnterTimestampMonotonic") is None  # 0 = never
    assert vs.monotonic_us(p, "Missing") is None
    env = vs.parse_environment(p["Environment"])
    assert env["VLLM_CACHE_ROOT"] == "/var/lib/vllm/default/cache/vllm"
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "600"


def test_parse_environment_quoted():
    # MADE: systemd quotes values containing spaces
    env = vs.parse_environment('A=1 "B=two words" C=')
    assert env == {"A": "1", "B": "two words", "C": ""}


def test_find_journal_entry():
    text = "\n".join(["-- No entries --", J_START, J_DONE])
    e = vs.find_journal_entry(text, vs.STARTUP_COMPLETE, INV)
    assert e["realtime_us"] == 1796002904432353
    assert e["monotonic_us"] == 3522543482
    assert e["pid"] == "7433"
    assert vs.find_journal_entry(J_START, vs.STARTUP_COMPLETE) is None
    assert vs.find_journal_entry(J_DONE, vs.STARTUP_COMPLETE, "other-invocation") is None
    assert vs.find_journal_entry(J_BYTES, vs.STARTUP_COMPLETE, INV)["monotonic_us"] == 5


def test_timeline():
    p = vs.parse_systemctl_show(SHOW)
    e = vs.find_journal_entry(J_DONE, vs.STARTUP_COMPLETE)
    offset = e["realtime_us"] - e["monotonic_us"]
    t0 = 3508000000 + offset  # start command 0.676274 s before ExecMainStart
    t = vs.timeline(t0, e, p, health_us=t0 + 14_600_000, ready_us=t0 + 14_900_000)
    assert t["cmd_to_main_start_s"] == pytest.approx(0.676, abs=1e-3)
    assert t["main_to_startup_complete_s"] == pytest.approx(13.867, abs=1e-3)
    assert t["cmd_to_startup_complete_s"] == pytest.approx(14.543, abs=1e-3)
    assert t["main_to_active_s"] == pytest.approx(14.506, abs=1e-3)
    assert t["cmd_to_active_s"] == pytest.approx(15.182, abs=1e-3)
    assert t["warmup_hook_s"] == pytest.approx(0.639, abs=1e-3)
    assert t["cmd_to_health_s"] == 14.6 and t["cmd_to_ready_s"] == 14.9


def test_timeline_without_journal_entry():
    t = vs.timeline(0, None, vs.parse_systemctl_show(SHOW))
    assert t["cmd_to_startup_complete_s"] is None and t["cmd_to_active_s"] is None
    assert t["main_to_active_s"] == pytest.approx(14.506, abs=1e-3)


def test_completion_tokens():
    # MADE: /v1/completions bodies in vLLM's OpenAI format
    assert vs.completion_tokens({"choices": [{"text": " Paris"}],
                                 "usage": {"prompt_tokens": 6, "completion_tokens": 16, "total_tokens": 22}}) == 16
    assert vs.completion_tokens({"choices": [{"text": ""}], "usage": {"completion_tokens": 0}}) == 0
    assert vs.completion_tokens({"choices": [{"text": "x"}]}) == 1
    assert vs.completion_tokens({"object": "error", "message": "bad"}) == 0
