# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Cache-aware routing (issue 34) through a REAL HAProxy (Debian's haproxy, the gateway role's
own preflight and template: tests/integration/gateway_render.yml) in front of three small HTTP
servers on loopback that answer with their own name.

- gateway_routing {chat: session, docs: prefix}, tiny left at leastconn: a conversation
  (x-session-id, else the body's "user") sticks to one server; a shared system prompt or prompt
  prefix sticks; keys spread over the servers; requests without a key still get answers.
- drain (the runtime API the role's drain entry point uses): the drained server's sessions move,
  every other session keeps its server (consistent hashing); ready: they come back.
- a leastconn-only fleet renders no hashing line at all (unchanged config for existing gateways).
- bad gateway_routing fails in the preflight naming the variable.

Runs as root (haproxy's chroot and user); skips when haproxy is not installed (.ci/run
installs it).

    pytest -q tests/integration/test_gateway_routing_live.py
"""
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from ansible_cli import ansible_env, ansible_tool  # noqa: E402  pylint: disable=wrong-import-position
from collection_path import ROOT  # noqa: E402  pylint: disable=wrong-import-position
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
KEY = "routing-test-key"
pytestmark = [
    pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy not installed (apt-get install haproxy)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="haproxy's chroot and user need root"),
]
NODES = ("n1", "n2", "n3")


class Echo(object):
    """An HTTP server answering every request with its name (and /health 200)."""

    def __init__(self, name):
        class H(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = name.encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass
        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # HAProxy's health checks close before the answer is read

        self.port = free_port()
        self.httpd = Server(("127.0.0.1", self.port), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def view(name, served, port):
    return {"name": name, "served_name": served, "served_model_name": served, "host": "127.0.0.1", "port": port}


def render(tmp_path, routing, extra=None):
    """The role's preflight + template for three vLLM hosts, each serving chat, docs and tiny on its own ports."""
    echoes = {}
    hosts = {}
    for n in NODES:
        views = []
        for model in ("chat", "docs", "tiny"):
            e = Echo("%s/%s" % (n, model))
            echoes[(n, model)] = e
            views.append(view(model, model, e.port))
        hosts[n] = {"vllm_view": views, "gateway_upstream_address": "127.0.0.1"}
    port = free_port()
    out = tmp_path / "out"
    out.mkdir()
    inventory = {"all": {"children": {
        "gateway": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}},
        "vllm": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    variables = dict({"out_dir": str(out), "gateway_port": port, "gateway_bind_address": "127.0.0.1",
                      "gateway_config_dir": str(out), "gateway_socket": str(out / "admin.sock"),
                      "gateway_api_key": KEY, "gateway_health_interval": "500ms", "gateway_health_rise": 1,
                      "gateway_routing": routing}, **(extra or {}))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(ansible_env(), ANSIBLE_NOCOLOR="1")
    p = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                        "-e", "@" + str(tmp_path / "vars.json"),
                        os.path.join(ROOT, "tests", "integration", "gateway_render.yml")],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    return p, out, port, echoes


class Gateway(object):
    def __init__(self, out, port):
        self.out, self.port = out, port
        cfg = str(out / "haproxy.cfg")
        check = subprocess.run([HAPROXY, "-c", "-q", "-f", cfg], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            if all(s["status"] == "UP" for s in self.servers() if s["server"].startswith("n")):
                return
            time.sleep(0.3)
        raise AssertionError("servers not UP: %s" % self.servers())

    def admin(self, cmd):
        s = socket.socket(socket.AF_UNIX)
        for dummy in range(50):
            try:
                s.connect(str(self.out / "admin.sock"))
                break
            except OSError:
                time.sleep(0.2)
        s.sendall(cmd.encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return data.decode()

    def servers(self):
        try:
            lines = self.admin("show stat").splitlines()
        except OSError:
            return []
        head = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(head, line.split(","))) for line in lines[1:] if line]
        return [{"backend": r["pxname"], "server": r["svname"], "status": r["status"]}
                for r in rows if r["svname"] not in ("FRONTEND", "BACKEND")]

    def ask(self, path, body, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY}
        h.update(headers or {})
        conn.request("POST", path, body=json.dumps(body), headers=h)
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        assert resp.status == 200, (resp.status, data)
        return data.split("/")[0]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    p, out, port, dummy = render(tmp_path_factory.mktemp("gw"), {"chat": "session", "docs": "prefix"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    gw = Gateway(out, port)
    yield gw
    gw.stop()


def chat(gw, session=None, user=None, text="Hello"):
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    if user:
        body["user"] = user
    return gw.ask("/v1/chat/completions", body, {"x-session-id": session} if session else None)


def test_the_rendered_config_routes_each_model_its_way(gateway):
    cfg = (gateway.out / "haproxy.cfg").read_text()
    blocks = {b.split("\n", 1)[0].strip(): b for b in cfg.split("\nbackend ")[1:]}
    assert "balance hash var(txn.session)" in blocks["m_chat"] and "hash-type consistent" in blocks["m_chat"]
    assert "balance hash var(txn.prefix)" in blocks["m_docs"] and "hash-balance-factor 125" in blocks["m_docs"]
    assert "balance leastconn" in blocks["m_tiny"] and "hash" not in blocks["m_tiny"]


def test_a_conversation_sticks_to_one_instance_and_conversations_spread(gateway):
    homes = {}
    for i in range(24):
        got = {chat(gateway, session="conv-%d" % i, text="turn %d" % t) for t in range(4)}
        assert len(got) == 1, ("conv-%d" % i, got)
        homes["conv-%d" % i] = got.pop()
    assert len(set(homes.values())) >= 2, homes
    # The body's "user" when there is no session header.
    assert len({chat(gateway, user="alice", text="t%d" % t) for t in range(4)}) == 1
    # No key at all: still answered (round robin).
    assert {chat(gateway) for dummy in range(6)} <= set(NODES)


def test_a_shared_prompt_prefix_sticks(gateway):
    system = "You are the support assistant of ACME. Answer briefly and cite the manual. " * 4
    got = {gateway.ask("/v1/chat/completions", {"model": "docs", "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": "question %d" % q}]}) for q in range(6)}
    assert len(got) == 1, got
    doc = "Chapter 1. The installation. " * 20
    got = {gateway.ask("/v1/completions", {"model": "docs", "prompt": doc + "Q%d" % q}) for q in range(6)}
    assert len(got) == 1, got
    # Different prefixes spread.
    homes = {gateway.ask("/v1/completions", {"model": "docs", "prompt": "document %d " % d * 30}) for d in range(24)}
    assert len(homes) >= 2, homes


def test_drain_moves_only_the_drained_servers_sessions(gateway):
    before = {"conv-%d" % i: chat(gateway, session="conv-%d" % i) for i in range(24)}
    victim = max(NODES, key=lambda n: sum(1 for v in before.values() if v == n))
    assert "" == gateway.admin("set server m_chat/%s__chat state drain" % victim).strip()
    try:
        after = {s: chat(gateway, session=s) for s in before}
        for s, home in before.items():
            if home == victim:
                assert after[s] != victim, (s, after[s])
            else:
                assert after[s] == home, (s, home, after[s])
    finally:
        gateway.admin("set server m_chat/%s__chat state ready" % victim)
    assert {s: chat(gateway, session=s) for s in before} == before


def test_leastconn_only_renders_no_hashing(tmp_path):
    p, out, dummy, dummy2 = render(tmp_path, "leastconn")
    assert p.returncode == 0, p.stdout[-3000:]
    cfg = (out / "haproxy.cfg").read_text()
    assert "hash" not in cfg.replace("sha2(256)", "") and "txn.session" not in cfg and "txn.prefix" not in cfg
    assert cfg.count("balance leastconn") == 3


@pytest.mark.parametrize("routing,message", [
    ("sticky", "gateway_routing 'sticky' is no routing mode"),
    ({"nope": "session"}, "gateway_routing names nope, which this gateway does not serve"),
    ({"chat": "round-robin"}, "gateway_routing[chat] 'round-robin' is no routing mode"),
])
def test_bad_routing_fails_in_the_preflight_naming_the_variable(tmp_path, routing, message):
    p, out, dummy, dummy2 = render(tmp_path, routing)
    assert p.returncode != 0 and message in p.stdout, p.stdout[-3000:]
    assert not (out / "haproxy.cfg").exists()
