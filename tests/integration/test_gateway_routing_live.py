# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Cache-aware routing and per-key limits (issue 34) through a REAL HAProxy (Debian's haproxy, the gateway role's
own preflight and template: tests/integration/gateway_render.yml) in front of three small HTTP
servers on loopback that answer with their own name.

- gateway_routing {chat: session, docs: prefix}, tiny left at leastconn: a conversation
  (x-session-id, else the body's "user") sticks to one server; a shared system prompt or prompt
  prefix sticks; keys spread over the servers; requests without a key still get answers.
- drain (the runtime API the role's drain entry point uses): the drained server's sessions move,
  every other session keeps its server (consistent hashing); ready: they come back.
- a leastconn-only fleet renders no hashing line at all (unchanged config for existing gateways).
- bad gateway_routing fails in the preflight naming the variable.
- the gateway agent (vllm_service's llmops-vllm-agent, here a stand-in answering what the test sets): agent
  down on every server of a model -> requests held (hold.lua) -> agent up -> served; a server drained through
  the runtime API stays drained while its agent says up; agent down on one of two servers -> all traffic to
  the other.
- per-key limits (gateway_api_key_limits, gateway_api_keys entries' limits): requests per window
  and requests in flight, per key and per (key, model); over a limit 429 with Retry-After and an
  OpenAI-shaped JSON error (Anthropic's on /v1/messages), the server never sees it; a key without
  limits is not limited; the stick table holds digests, never keys.

Runs as root (haproxy's chroot and user); skips when haproxy is not installed (.ci/run
installs it).

    pytest -q tests/integration/test_gateway_routing_live.py
"""
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from ansible_cli import ansible_env, ansible_tool  # noqa: E402  pylint: disable=wrong-import-position
from collection_path import ROOT  # noqa: E402  pylint: disable=wrong-import-position
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position
from agent_standin import Agent  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.plugins.module_utils import haproxy_runtime  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmops.serving.plugins.module_utils import gateway_usage  # noqa: E402  pylint: disable=wrong-import-position

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
KEY = "routing-test-key"
pytestmark = [
    pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy not installed (apt-get install haproxy)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="haproxy's chroot and user need root"),
]
NODES = ("n1", "n2", "n3")
HOLD_S = 6


def vllm_answer(name, request):
    """vLLM 0.32's chat completion for ``request`` (a dict with max_tokens): (content type, body chunks).
    Streams end with the usage chunk --enable-force-include-usage adds; the text carries an escaped usage
    object (a model can write one) that must not count."""
    text = "%s says \"usage\":{\"prompt_tokens\":999,\"completion_tokens\":999}" % name
    prompt = sum(len(m.get("content", "").split()) for m in request.get("messages", [])) + 7
    completion = int(request["max_tokens"])
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
             "prompt_tokens_details": None}
    base = {"id": "chatcmpl-1", "created": 1764806400, "model": request["model"]}
    if not request.get("stream"):
        return "application/json", [json.dumps(dict(base, object="chat.completion", choices=[
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            usage=usage, prompt_logprobs=None, kv_transfer_params=None), separators=(",", ":")).encode()]
    chunks = [dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": {"content": w}}])
              for w in text.split(" ")]
    chunks.append(dict(base, object="chat.completion.chunk", choices=[], usage=usage))
    events = ["data: %s\n\n" % json.dumps(c, separators=(",", ":")) for c in chunks] + ["data: [DONE]\n\n"]
    # split across writes, the usage object included (HAProxy sees it in two pieces)
    raw = "".join(events).encode()
    cut = raw.rindex(b'"total_tokens"')
    return "text/event-stream", [raw[:cut], raw[cut:]]


class Echo(object):
    """An HTTP server answering every request with its name (and /health 200); a request with max_tokens
    gets vLLM's own answer shape with usage (vllm_answer)."""

    def __init__(self, name):
        echo = self
        self.posts = 0

        class H(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                if self.command == "POST":
                    echo.posts += 1
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if b'"slow"' in raw:
                    time.sleep(2)
                if b'"max_tokens"' in raw and self.command == "POST" and self.path == "/v1/chat/completions":
                    ctype, chunks = vllm_answer(name, json.loads(raw))
                    self.send_response(200)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(sum(len(c) for c in chunks)))
                    self.end_headers()
                    for c in chunks:
                        self.wfile.write(c)
                        self.wfile.flush()
                        time.sleep(0.01)
                    return
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
    # tiny's instances all serve the LoRA adapter tiny-sql (the gateway routes its name to them).
    lora = [{"name": "tiny-sql", "path": "/srv/lora/sql", "base": None}] if served == "tiny" else []
    return {"name": name, "served_name": served, "served_model_name": served, "host": "127.0.0.1", "port": port,
            "lora_adapters": lora}


def render(tmp_path, routing, extra=None, gateways=("localhost",), agents=None):
    """The role's preflight + template for three vLLM hosts, each serving chat, docs and tiny on its own ports.
    Returns (proc, out dir, frontend port, echoes) of the first gateway; with several gateways the others'
    (out dir, port) are in render.others."""
    echoes = {}
    hosts = {}
    for n in NODES:
        views = []
        for model in ("chat", "docs", "tiny"):
            e = Echo("%s/%s" % (n, model))
            echoes[(n, model)] = e
            views.append(view(model, model, e.port))
        hosts[n] = {"vllm_view": views, "gateway_upstream_address": "127.0.0.1"}
        if agents:
            hosts[n]["vllm_gateway_agent"] = {"port": agents[n].port}
    gw_hosts, outs = {}, []
    for g in gateways:
        out = tmp_path / ("out" if len(gateways) == 1 else "out-" + g)
        out.mkdir()
        port = free_port()
        outs.append((out, port))
        gw_hosts[g] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "out_dir": str(out), "gateway_port": port, "gateway_config_dir": str(out),
                       "gateway_socket": str(out / "admin.sock"), "gateway_peer_address": "127.0.0.1",
                       "gateway_peers_port": free_port()}
    inventory = {"all": {"children": {"gateway": {"hosts": gw_hosts}, "vllm": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    variables = dict({"gateway_bind_address": "127.0.0.1", "gateway_api_key": KEY, "gateway_health_interval": "500ms",
                      "gateway_health_rise": 1, "gateway_routing": routing}, **(extra or {}))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(ansible_env(), ANSIBLE_NOCOLOR="1")
    p = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                        "-e", "@" + str(tmp_path / "vars.json"),
                        os.path.join(ROOT, "tests", "integration", "gateway_render.yml")],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    render.others = outs[1:]
    return p, outs[0][0], outs[0][1], echoes


class Gateway(object):
    def __init__(self, out, port):
        self.out, self.port = out, port
        cfg = str(out / "haproxy.cfg")
        check = subprocess.run([HAPROXY, "-c", "-q", "-f", cfg], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = open(str(out / "haproxy.log"), "wb")  # its log (log stdout): no key may appear in it
        self.started = time.time()
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if all(s["status"] == "UP" for s in self.servers() if s["server"].startswith("n")):
                return
            time.sleep(0.3)
        raise AssertionError("servers not UP: %s" % self.servers())

    def admin(self, cmd):
        """One command on the admin socket (the collection's own runtime-API client), once HAProxy made it."""
        rt = haproxy_runtime.Runtime(str(self.out / "admin.sock"))
        for dummy in range(50):
            if rt.available():
                break
            time.sleep(0.2)
        return rt.command(cmd)

    def servers(self):
        try:
            lines = self.admin("show stat").splitlines()
        except OSError:
            return []
        head = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(head, line.split(","))) for line in lines[1:] if line]
        return [{"backend": r["pxname"], "server": r["svname"], "status": r["status"], "scur": int(r["scur"] or 0),
                 "chkdown": int(r["chkdown"] or 0)} for r in rows if r["svname"] not in ("FRONTEND", "BACKEND")]

    def idle(self):
        """Wait until no server has a request in flight. HAProxy's bounded-load hashing (hash-balance-factor)
        counts the requests a server is serving: a stream that the client already has the answer of but
        HAProxy has not closed yet still counts, and on a loaded machine the next request of a sequential
        client can meet it and spill over to the next server, which is the feature, not stickiness failing."""
        deadline = time.time() + 5
        while time.time() < deadline and any(s["scur"] for s in self.servers()):
            time.sleep(0.02)

    def post(self, path, body, headers=None, key=KEY):
        """(status, headers, body text) of one request on a new connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
        h.update(headers or {})
        conn.request("POST", path, body=json.dumps(body), headers=h)
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), data

    def get(self, path, key=KEY):
        """(status, body text) of one GET on a new connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        return resp.status, data

    def ask(self, path, body, headers=None):
        """The server that answered one request of a sequential client (no other request in flight)."""
        self.idle()
        status, dummy, data = self.post(path, body, headers)
        assert status == 200, (status, data)
        return data.split("/")[0]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    p, out, port, dummy = render(tmp_path_factory.mktemp("gw"), {"chat": "session", "docs": "prefix"},
                                 {"gateway_hold_timeout": HOLD_S})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    gw = Gateway(out, port)
    yield gw
    gw.stop()


def test_a_lora_adapter_goes_to_its_base_models_instances_and_the_runtime_routes_never_pass(gateway):
    """Issue 33 item 2: the name of an adapter every instance of tiny serves reaches tiny's
    instances; the runtime LoRA routes (they load files from the host) are refused at the
    gateway, even with a model in the body."""
    gateway.idle()
    status, dummy, data = gateway.post("/v1/completions", {"model": "tiny-sql", "prompt": "hi"})
    assert status == 200 and data.split("/")[1].startswith("tiny"), (status, data)
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        status, dummy, data = gateway.post(path, {"model": "tiny", "lora_name": "x", "lora_path": "/etc"})
        assert status == 404, (path, status, data)


def test_the_model_list_is_the_fleets_not_one_backends(gateway):
    """GET /v1/models is answered by the gateway (models.lua): every model and adapter it routes, in OpenAI's
    list shape; passed to a backend, a client saw one server's answer (here its name, from vLLM one model)."""
    status, body = gateway.get("/v1/models")
    assert status == 200, body
    listed = json.loads(body)
    assert listed["object"] == "list", listed
    assert [m["id"] for m in listed["data"]] == ["chat", "docs", "tiny", "tiny-sql"], listed
    assert {(m["object"], m["owned_by"]) for m in listed["data"]} == {("model", "vllm")}, listed
    assert gateway.get("/v1/models", key=None)[0] == 401
    assert gateway.get("/v1/models", key="not-a-key")[0] == 401


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
        assert len(got) == 1, ("conv-%d" % i, got, gateway.servers())
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


def _tiny_in_thread(gw, results):
    def ask():
        t0 = time.time()
        status, headers, data = gw.post("/v1/chat/completions", {"model": "tiny", "messages": [
            {"role": "user", "content": "held"}]})
        results.append((status, headers, data, time.time() - t0))
    t = threading.Thread(target=ask)
    t.start()
    return t


def test_a_request_for_a_model_whose_servers_are_all_restarting_is_held_until_one_is_back(gateway):
    """Held, not failed: tiny's servers all in maintenance (its instances restarting): the request waits at the
    gateway and is served by the first server back; without one it gets a JSON 503 with Retry-After after the hold."""
    for n in NODES:
        assert "" == gateway.admin("set server m_tiny/%s__tiny state maint" % n).strip()
    try:
        results = []
        t = _tiny_in_thread(gateway, results)
        time.sleep(2)
        assert not results, results  # still waiting, not a 503
        gateway.admin("set server m_tiny/n2__tiny state ready")
        t.join(HOLD_S + 10)
        (status, dummy, data, took), = results
        assert status == 200 and data == "n2/tiny", (status, data)
        assert 2 <= took < HOLD_S + 2, took
        gateway.admin("set server m_tiny/n2__tiny state maint")
        t = _tiny_in_thread(gateway, results)
        t.join(HOLD_S + 10)
        status, headers, data, took = results[1]
        assert status == 503 and headers.get("retry-after") == "10", (status, headers, data)
        assert json.loads(data)["error"]["code"] == "model_unavailable" and "%d s" % HOLD_S in data, data
        assert HOLD_S <= took < HOLD_S + 3, took
    finally:
        for n in NODES:
            gateway.admin("set server m_tiny/%s__tiny state ready" % n)


def test_without_a_hold_a_model_with_no_server_answers_503_at_once(tmp_path):
    p, out, port, dummy = render(tmp_path, "leastconn", {"gateway_hold_timeout": 0})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    cfg = (out / "haproxy.cfg").read_text()
    assert "hold.lua" not in cfg and "llmops_hold" not in cfg
    gw = Gateway(out, port)
    try:
        for n in NODES:
            gw.admin("set server m_tiny/%s__tiny state maint" % n)
        results = []
        _tiny_in_thread(gw, results).join(10)
        (status, dummy, dummy2, took), = results
        assert status == 503 and took < 1.5, (status, took)
    finally:
        gw.stop()


def test_leastconn_only_renders_no_hashing(tmp_path):
    p, out, dummy, dummy2 = render(tmp_path, "leastconn")
    assert p.returncode == 0, p.stdout[-3000:]
    cfg = (out / "haproxy.cfg").read_text()
    assert "hash" not in cfg.replace("sha2(256)", "") and "txn.session" not in cfg and "txn.prefix" not in cfg
    assert cfg.count("balance leastconn") == 3
    assert "st_llm_keys" not in cfg and "track-sc" not in cfg  # no key has limits: no limit rule
    assert "agent-check" not in cfg  # no host publishes a gateway agent: the /health check alone, as before


@pytest.mark.parametrize("routing,message", [
    ("sticky", "gateway_routing 'sticky' is no routing mode"),
    ({"nope": "session"}, "gateway_routing names nope, which this gateway does not serve"),
    ({"chat": "round-robin"}, "gateway_routing[chat] 'round-robin' is no routing mode"),
])
def test_bad_routing_fails_in_the_preflight_naming_the_variable(tmp_path, routing, message):
    p, out, dummy, dummy2 = render(tmp_path, routing)
    assert p.returncode != 0 and message in p.stdout, p.stdout[-3000:]
    assert not (out / "haproxy.cfg").exists()


LIMITED = "limited-key-1234"
TEAM = "team-key-5678"
FREE = "free-key-9012"


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    extra = {"gateway_api_key": LIMITED, "gateway_api_key_limits": {"requests": 5}, "gateway_limit_window_s": 30,
             "gateway_api_keys": {"chat": [{"key": TEAM, "limits": {"concurrent": 1}}, FREE]}}
    p, out, port, echoes = render(tmp_path_factory.mktemp("lim"), "leastconn", extra)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    gw = Gateway(out, port)
    gw.echoes = echoes
    yield gw
    gw.stop()


def test_requests_over_the_window_limit_get_429_in_the_clients_shape(limited):
    chat_body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    posts = served(limited)
    got = [limited.post("/v1/chat/completions", chat_body, key=LIMITED) for dummy in range(7)]
    assert [g[0] for g in got] == [200] * 5 + [429] * 2, [g[0] for g in got]
    assert served(limited) == posts + 5  # the refused ones never reached a server
    status, headers, body = got[5]
    assert headers["retry-after"] == "30" and headers["content-type"] == "application/json"
    err = json.loads(body)["error"]
    assert err["code"] == "rate_limit_exceeded" and "request limit" in err["message"]
    # The key's limit holds across models (gateway_api_key: every model); Anthropic's shape on /v1/messages.
    status, headers, body = limited.post("/v1/messages", {"model": "docs", "messages": [], "max_tokens": 1},
                                         key=LIMITED)
    assert status == 429 and json.loads(body)["error"]["type"] == "rate_limit_error", body
    # Other keys are not limited by it; a key without limits is never limited.
    assert {limited.post("/v1/chat/completions", chat_body, key=FREE)[0] for dummy in range(12)} == {200}
    # The table holds digests, never a key.
    table = limited.admin("show table st_llm_keys")
    assert LIMITED not in table and TEAM not in table and hashlib_hex(LIMITED) in table, table


def test_a_key_lists_only_the_models_it_may_use(limited):
    """A key for chat only (gateway_api_keys.chat) lists chat; the key for every model lists them all.
    The list is not a request to a model: it never reaches a server and no limit counts it."""
    posts = served(limited)
    lists = {name: json.loads(limited.get("/v1/models", key=key)[1]) for name, key in (("team", TEAM), ("free", FREE))}
    assert {n: [m["id"] for m in v["data"]] for n, v in lists.items()} == {"team": ["chat"], "free": ["chat"]}, lists
    status, body = limited.get("/v1/models", key=LIMITED)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["chat", "docs", "tiny", "tiny-sql"], body
    assert served(limited) == posts


def served(gw):
    return sum(e.posts for e in gw.echoes.values())


def hashlib_hex(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()


def test_requests_in_flight_over_the_limit_get_429_and_nothing_reaches_the_server(limited):
    slow = {"model": "chat", "messages": [{"role": "user", "content": "x"}], "slow": True}
    results = []
    posts = served(limited)
    first = threading.Thread(target=lambda: results.append(limited.post("/v1/chat/completions", slow, key=TEAM)))
    first.start()
    time.sleep(0.5)
    status, headers, body = limited.post("/v1/chat/completions", slow, key=TEAM)
    first.join()
    assert results[0][0] == 200 and status == 429, (results, status, body)
    assert served(limited) == posts + 1
    assert headers["retry-after"] == "1" and "in flight" in json.loads(body)["error"]["message"]
    # The team key's limit is for chat: after the first ended, the next one passes.
    assert limited.post("/v1/chat/completions", dict(slow, slow=False), key=TEAM)[0] == 200


def test_bad_limits_fail_in_the_preflight_naming_the_variable(tmp_path):
    p, out, dummy, dummy2 = render(tmp_path, "leastconn", {"gateway_api_keys": {
        "chat": [{"key": TEAM, "limits": {"requests_per_minute": 60}}]}})
    assert p.returncode != 0 and "gateway_api_keys[chat][0].limits has unknown keys requests_per_minute" in p.stdout
    assert TEAM not in p.stdout


def test_two_gateways_share_the_counters_through_peers(tmp_path):
    """Two gateway hosts (two HAProxy processes, peers on loopback): a key's requests count on both."""
    extra = {"gateway_api_key": LIMITED, "gateway_api_key_limits": {"requests": 6}}
    p, out_a, port_a, dummy = render(tmp_path, "leastconn", extra, gateways=("gw-a", "gw-b"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    (out_b, port_b), = render.others
    cfg = (out_a / "haproxy.cfg").read_text()
    assert "localpeer gw-a" in cfg and "peer gw-b 127.0.0.1:" in cfg and "peers llmops" in cfg
    a, b = Gateway(out_a, port_a), Gateway(out_b, port_b)
    try:
        # The peers connect on their own after the start (HAProxy retries every few seconds).
        deadline = time.time() + 30
        while time.time() < deadline and not all("ESTA" in gw.admin("show peers") for gw in (a, b)):
            time.sleep(0.5)
        assert all("ESTA" in gw.admin("show peers") for gw in (a, b)), a.admin("show peers")
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        got = [a.post("/v1/chat/completions", body, key=LIMITED)[0]]
        # The key's first entry reaches the other gateway (its first push after the connection can take
        # a moment; two gateways creating one entry at once may lose a count: docs/gateway.md says so).
        deadline = time.time() + 10
        while time.time() < deadline and "http_req_rate(%d)=1" % 60000 not in b.admin("show table st_llm_keys"):
            time.sleep(0.2)
        for gw, other in ((b, a), (a, b), (b, a), (a, b), (b, a), (a, b), (b, a)):
            got.append(gw.post("/v1/chat/completions", body, key=LIMITED)[0])
            # Each increment reaches the other gateway before the next request (seen in its table, not
            # slept for: on a loaded machine a push can take longer than any fixed pause).
            want = "http_req_rate(%d)=%d" % (60000, len(got))
            deadline = time.time() + 10
            while time.time() < deadline and want not in other.admin("show table st_llm_keys"):
                time.sleep(0.1)
        assert got == [200] * 6 + [429] * 2, got
    finally:
        a.stop()
        b.stop()


AGENT_HOLD_S = 10


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """tiny on n1 and n2 only (gateway_backends), each host's agent on its own port (one network namespace)."""
    stand_ins = {n: Agent() for n in NODES}
    extra = {"gateway_hold_timeout": AGENT_HOLD_S, "gateway_backends": {"tiny": ["n1/tiny", "n2/tiny"]}}
    p, out, port, echoes = render(tmp_path_factory.mktemp("agent"), "leastconn", extra, agents=stand_ins)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    gw = Gateway(out, port)
    gw.agents, gw.echoes = stand_ins, echoes
    yield gw
    gw.stop()


def tiny_status(gw):
    return {s["server"].split("__")[0]: s["status"] for s in gw.servers() if s["backend"] == "m_tiny"}


def wait_status(gw, want, timeout=15):
    """Wait until every server of m_tiny named in ``want`` has that status (UP, DOWN, DRAIN)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = tiny_status(gw)
        if all(got.get(n, "").split(" ")[0] == st for n, st in want.items()):
            return got
        time.sleep(0.1)
    raise AssertionError("m_tiny servers %s, wanted %s" % (tiny_status(gw), want))


def set_agents(gw, answer, nodes=("n1", "n2")):
    for n in nodes:
        gw.agents[n].state["tiny"] = answer


def test_the_rendered_config_asks_each_hosts_agent_for_its_instance(agents):
    cfg = (agents.out / "haproxy.cfg").read_text()
    for n in ("n1", "n2"):
        line = ('server %s__tiny 127.0.0.1:%d check agent-check agent-port %d agent-send "tiny\\n" agent-inter 500ms'
                % (n, agents.echoes[(n, "tiny")].port, agents.agents[n].port))
        assert line in cfg, cfg
    assert agents.agents["n1"].asked > 0 and agents.agents["n2"].asked > 0


def test_an_instance_warming_up_gets_no_request_it_is_held_until_the_agent_says_up(agents):
    """Both tiny servers answer /health 200 (as vLLM does while its warmup hook runs) but their agents say down
    (vllm@tiny activating): the request is held, not sent, and served once n2's agent says up."""
    set_agents(agents, "down #activating")
    try:
        wait_status(agents, {"n1": "DOWN", "n2": "DOWN"})
        posts = {n: agents.echoes[(n, "tiny")].posts for n in ("n1", "n2")}
        results = []
        t = _tiny_in_thread(agents, results)
        time.sleep(2)
        assert not results, results  # held, not a 503 and not sent to a warming instance
        assert posts == {n: agents.echoes[(n, "tiny")].posts for n in ("n1", "n2")}
        set_agents(agents, "up", ("n2",))
        t.join(AGENT_HOLD_S + 10)
        (status, dummy, data, took), = results
        assert status == 200 and data == "n2/tiny", (status, data)
        assert 2 <= took < AGENT_HOLD_S, took
    finally:
        set_agents(agents, "up")
    wait_status(agents, {"n1": "UP", "n2": "UP"})


def test_a_drained_server_stays_drained_while_its_agent_says_up(agents):
    """The agent answers only up/down: a drain the role set through the runtime API holds while it says up."""
    wait_status(agents, {"n1": "UP", "n2": "UP"})
    assert "" == agents.admin("set server m_tiny/n1__tiny state drain").strip()
    try:
        asked = agents.agents["n1"].asked
        deadline = time.time() + 10
        while agents.agents["n1"].asked < asked + 3 and time.time() < deadline:  # three answers "up" after the drain
            time.sleep(0.1)
        assert agents.agents["n1"].asked >= asked + 3
        # "DRAIN (agent)": HAProxy's label for a draining server with an agent-check; still drained.
        assert tiny_status(agents)["n1"].startswith("DRAIN"), tiny_status(agents)
        got = {agents.ask("/v1/chat/completions", {"model": "tiny", "messages": []}) for dummy in range(8)}
        assert got == {"n2"}, got
    finally:
        agents.admin("set server m_tiny/n1__tiny state ready")
    wait_status(agents, {"n1": "UP", "n2": "UP"})


def test_agent_down_on_one_of_two_servers_sends_all_traffic_to_the_other(agents):
    set_agents(agents, "down #activating", ("n1",))
    try:
        wait_status(agents, {"n1": "DOWN", "n2": "UP"})
        got = {agents.ask("/v1/chat/completions", {"model": "tiny", "messages": []}) for dummy in range(8)}
        assert got == {"n2"}, got
    finally:
        set_agents(agents, "up")
    wait_status(agents, {"n1": "UP", "n2": "UP"})
    got = {agents.ask("/v1/chat/completions", {"model": "tiny", "messages": []}) for dummy in range(8)}
    assert got == {"n1", "n2"}, got


# --- Token usage per key and token quotas (issue 34 items 2-3) ------------------------------------------------
TEAM_A = "team-a-key-3456"
QUOTA = "quota-key-7890"
QUOTA_TOKENS, QUOTA_PERIOD = 100, 5


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    metrics_port = free_port()
    extra = {"gateway_api_key_name": "ops", "gateway_metrics_port": metrics_port,
             "gateway_api_keys": {"chat": [{"key": TEAM_A, "name": "team-a"},
                                           {"key": QUOTA, "name": "team-q",
                                            "limits": {"tokens": QUOTA_TOKENS, "period": QUOTA_PERIOD}}]}}
    p, out, port, echoes = render(tmp_path_factory.mktemp("usage"), "leastconn", extra)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    gw = Gateway(out, port)
    gw.echoes, gw.metrics_port = echoes, metrics_port
    yield gw
    gw.stop()


def metrics(gw):
    conn = http.client.HTTPConnection("127.0.0.1", gw.metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def metric(text, name, key, model="chat"):
    line = '%s{key="%s",model="%s"} ' % (name, key, model)
    return sum(int(row[len(line):]) for row in text.splitlines() if row.startswith(line))


def usage_of(status, body):
    """The usage object of a JSON answer or of a stream's last chunk that has one."""
    assert status == 200, body
    if body.startswith("data:"):
        chunks = [json.loads(row[5:]) for row in body.splitlines() if row.startswith("data: {")]
        return [c["usage"] for c in chunks if c.get("usage")][-1]
    return json.loads(body)["usage"]


def test_usage_counters_equal_the_sum_of_the_answers_usage(counted):
    before = metrics(counted)
    sums = {"prompt": 0, "completion": 0}
    for i in range(6):
        body = {"model": "chat", "max_tokens": 3 + i, "stream": i % 2 == 1,
                "messages": [{"role": "user", "content": "tell me " * (i + 1)}]}
        status, dummy, text = counted.post("/v1/chat/completions", body, key=TEAM_A)
        u = usage_of(status, text)
        sums["prompt"] += u["prompt_tokens"]
        sums["completion"] += u["completion_tokens"]
    # The filter counts at the end of each answer: the client has it a moment before.
    deadline = time.time() + 5
    while time.time() < deadline:
        after = metrics(counted)
        if metric(after, "llmops_gateway_usage_requests_total", "team-a") - metric(
                before, "llmops_gateway_usage_requests_total", "team-a") == 6:
            break
        time.sleep(0.1)
    got = {k: metric(after, "llmops_gateway_%s_tokens_total" % k, "team-a")
           - metric(before, "llmops_gateway_%s_tokens_total" % k, "team-a") for k in sums}
    assert got == sums and sums["prompt"] > 0, (got, sums, after)
    assert metric(after, "llmops_gateway_usage_requests_total", "team-a") - metric(
        before, "llmops_gateway_usage_requests_total", "team-a") == 6
    # Requests without usage (answers without max_tokens here) are not counted; other keys count apart.
    counted.post("/v1/chat/completions", {"model": "chat", "messages": []}, key=TEAM_A)
    counted.post("/v1/chat/completions", {"model": "chat", "max_tokens": 2, "messages": []}, key=KEY)
    time.sleep(0.3)
    last = metrics(counted)
    assert metric(last, "llmops_gateway_usage_requests_total", "team-a") == metric(
        after, "llmops_gateway_usage_requests_total", "team-a")
    assert metric(last, "llmops_gateway_completion_tokens_total", "ops") >= 2


def test_a_token_quota_runs_out_with_429_and_resets_at_the_period(counted):
    # Start right after a period boundary (periods start at multiples of the period since the epoch).
    time.sleep(QUOTA_PERIOD - time.time() % QUOTA_PERIOD + 0.05)
    start = time.time()
    used, statuses = 0, []
    posts = served(counted)
    body = {"model": "chat", "max_tokens": 20, "messages": [{"role": "user", "content": "a b c"}]}
    counted_before = metric(metrics(counted), "llmops_gateway_usage_requests_total", "team-q")
    for dummy in range(8):
        status, headers, text = counted.post("/v1/chat/completions", body, key=QUOTA)
        statuses.append(status)
        if status != 200:
            break
        used += usage_of(status, text)["total_tokens"]
        # The answer's end reaches the counter (usage.lua's http_end) before the next request: seen in the
        # metrics, not slept for.
        deadline = time.time() + 2
        while time.time() < deadline and metric(metrics(counted), "llmops_gateway_usage_requests_total",
                                                "team-q") < counted_before + statuses.count(200):
            time.sleep(0.01)
    assert time.time() - start < QUOTA_PERIOD - 0.5, "the machine is too slow for this period"
    # 30 tokens each: 4 answers (120 >= 100) pass, the next is refused; none reached a server.
    assert statuses == [200] * 4 + [429] and used >= QUOTA_TOKENS, (statuses, used)
    assert served(counted) == posts + 4
    err = json.loads(text)["error"]
    assert err["code"] == "rate_limit_exceeded" and "token quota" in err["message"], text
    retry = int(headers["retry-after"])
    assert 0 < retry <= QUOTA_PERIOD, headers
    # Another key of the same model is not limited by it.
    assert counted.post("/v1/chat/completions", body, key=TEAM_A)[0] == 200
    # The next period: a new entry, the quota is back.
    time.sleep(QUOTA_PERIOD - time.time() % QUOTA_PERIOD + 0.05)
    assert counted.post("/v1/chat/completions", body, key=QUOTA)[0] == 200


def test_no_key_in_the_config_tables_log_or_metrics(counted):
    counted.post("/v1/chat/completions", {"model": "chat", "max_tokens": 1, "messages": []}, key=QUOTA)
    deadline = time.time() + 5  # HAProxy logs a request when it ends: wait for its line
    while time.time() < deadline and b"POST /v1/chat/completions" not in (counted.out / "haproxy.log").read_bytes():
        time.sleep(0.1)
    seen = {"haproxy.cfg": (counted.out / "haproxy.cfg").read_text(),
            "keys.map": (counted.out / "keys.map").read_text(),
            "log": (counted.out / "haproxy.log").read_bytes().decode(errors="replace"),
            "metrics": metrics(counted),
            "st_llm_tokens": counted.admin("show table st_llm_tokens")}
    for what, text in seen.items():
        for key in (KEY, TEAM_A, QUOTA):
            assert key not in text, (what, key)
    assert hashlib_hex(QUOTA) in seen["st_llm_tokens"] and "gpt0=" in seen["st_llm_tokens"]
    assert 'key="team-q"' in seen["metrics"] and "POST /v1/chat/completions" in seen["log"]


def test_bad_quotas_fail_in_the_preflight_naming_the_entry(tmp_path):
    p, out, dummy, dummy2 = render(tmp_path, "leastconn", {"gateway_api_keys": {
        "chat": ["k0", {"key": TEAM_A, "limits": {"tokens": 1000, "period": "fortnight"}}]}})
    assert p.returncode != 0 and "gateway_api_keys[chat][1].limits.period must be one of" in p.stdout, p.stdout[-2000:]
    assert TEAM_A not in p.stdout and not (out / "haproxy.cfg").exists()


def test_the_usage_playbook_reports_the_gateways_counters(counted, tmp_path):
    """playbooks/usage.yml without a monitoring host: each gateway's own counters, one table."""
    counted.post("/v1/chat/completions", {"model": "chat", "max_tokens": 4, "messages": []}, key=TEAM_A)
    time.sleep(0.3)
    want = [r for r in gateway_usage.rows_from_expositions([metrics(counted)]) if r["key"] == "team-a"]
    inventory = {"all": {"children": {"gateway": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gateway_metrics_port": counted.metrics_port, "gateway_bind_address": "127.0.0.1"}}}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    p = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                        os.path.join(ROOT, "playbooks", "usage.yml")], cwd=ROOT, env=dict(ansible_env(), ANSIBLE_NOCOLOR="1"),
                       capture_output=True, text=True, check=False, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "since each gateway last started (1 gateway(s)" in p.stdout, p.stdout
    row = [line.strip(" -'\"").split() for line in p.stdout.splitlines() if line.strip(" -'\"").startswith("team-a ")]
    w = want[0]
    assert row and row[0] == ["team-a", "chat"] + [str(n) for n in (w["requests"], w["prompt"], w["completion"],
                                                                    w["prompt"] + w["completion"])], p.stdout
    for key in (KEY, TEAM_A, QUOTA):
        assert key not in p.stdout


def quota_entries(gw):
    """{table key: gpt0} of the token quota table."""
    out = {}
    for line in gw.admin("show table st_llm_tokens").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "key" in fields and "gpt0" in fields:
            out[fields["key"]] = int(fields["gpt0"])
    return out


def test_a_reload_keeps_the_quota_table(counted):
    """One gateway with quotas is its own peer on loopback: a reload (haproxy -sf, as systemd's reload of the
    master does for its worker) hands the quota table to the new process."""
    body = {"model": "chat", "max_tokens": 3, "messages": []}
    for dummy in range(2):  # the second request adds the first one's tokens to the table
        assert counted.post("/v1/chat/completions", body, key=QUOTA)[0] in (200, 429)
        time.sleep(0.2)
    before = quota_entries(counted)
    assert before and any(v > 0 for v in before.values()), before
    cfg = (counted.out / "haproxy.cfg").read_text()
    assert "peers llmops" in cfg and "peer localhost 127.0.0.1:" in cfg and "store gpt0 peers llmops" in cfg
    # A process hands its tables on only once its own start-up sync is over (HAProxy's peers resync
    # timeout, 5 s): a reload in the first seconds after a start would start empty (docs/gateway.md).
    time.sleep(max(0.0, counted.started + 6 - time.time()))
    old = counted.proc
    counted.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(counted.out / "haproxy.cfg"), "-sf", str(old.pid)],
                                    stdout=counted.log, stderr=subprocess.STDOUT)
    old.wait(20)
    after = quota_entries(counted)
    assert all(after.get(k) == v for k, v in before.items()), (before, after)
