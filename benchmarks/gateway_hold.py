# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Failed requests while a model's ONLY instance restarts behind the gateway, with and without the hold
(issue 31 items 4 and 8; docs/reliability.md "Single instance restarting behind the gateway").

A REAL vLLM-CPU server (the host venv: scripts/testbed/host-vllm-venv.sh; the tiny model of
tests/integration/test_vllm_live.py, generated once into .cache/holdbench-model) behind Debian's HAProxy
rendered with the gateway role's own preflight and template (tests/integration/gateway_render.yml; one
backend, one server = that instance; the role's default health checks: every 2 s, rise 2, fall 2).
For each case, 200 completions (max_tokens 8) at concurrency 4 go through the gateway while the vLLM process
is restarted once, after the 20th request:
  bare:  SIGTERM to the process (an unplanned restart: systemd, a crash), then start it again;
  drain: as the role restarts an instance: set the server to drain at the gateway (runtime API), wait
         until it has no request in flight, SIGTERM, start, /health 200, set it ready.
  agentN: an operator's `systemctl restart` of an instance behind the gateway agent (vllm_service's
         llmops-vllm-agent, HAProxy agent-check every 2 s as the role renders it) with a stop delay of N s
         (vllm_gateway_stop_delay, ExecStop=): the unit deactivating (agent: down) for N s, SIGTERM, the
         unit activating (down) until /health 200 and one completion (the warmup hook), then active (up).
         systemd's states are played by the benchmark (no systemd here) with the agent script's answers;
         molecule/vllm_service checks the real unit (deactivating, agent down, old server still 200).
Settings: gateway_hold_timeout 120 (the default) and 0 (off, the control). Clients: a plain HTTP client
(one request per connection, no retries) and the `openai` client with its default max_retries=2.

Prints per case: sent, failed, the failure kinds, p50/p99 latency, attempts the client made, the restart's
seconds (SIGTERM to /health 200 on the instance itself) and the longest request (the longest hold seen
from the client); --out writes the same as JSON. No timed assertions.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/gateway_hold.py --out benchmarks/results/gateway_hold.json

Cases: hold 120 and off x plain and openai, bare SIGTERM; hold 120 and off x both clients, drained; hold 120 with
the agent and no stop delay (plain), with a 3 s stop delay (plain, openai) (11 restarts; --cases 0,8,9,10 for the
agent comparison alone).
Runs as root (haproxy's chroot and user). About 4-5 minutes on 2 cores (2026-12-04: vLLM start 22 s, restart
17-20 s; the cases of one run share one model and one vLLM port).
"""
import argparse
import http.client
import json
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import _bed  # the shared test bed (vLLM venv, tiny model, vLLM processes, rendered gateway, runtime API)
from _bed import KEY, Vllm, admin, pct, tiny_model, vllm_python  # noqa: F401  pylint: disable=unused-import
# tests/ is on the path _bed set.
from agent_standin import Agent  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order

CASES = [  # (hold seconds, restart, client)
    (120, "bare", "plain"), (120, "bare", "openai"),
    (0, "bare", "plain"), (0, "bare", "openai"),
    (120, "drain", "plain"), (120, "drain", "openai"),
    (0, "drain", "plain"), (0, "drain", "openai"),
    (120, "agent0", "plain"), (120, "agent3", "plain"), (120, "agent3", "openai"),
]


def render(workdir, hold, vllm_port, agent_port=None):
    """The role's preflight + template for one vLLM host serving `tiny` on vllm_port (with agent-check to
    agent_port when given); returns (out dir, port)."""
    agent = {"vllm_gateway_agent": {"port": agent_port, "address": "127.0.0.1"}} if agent_port else None
    return _bed.render(workdir, "hold%d%s" % (hold, "-agent" if agent_port else ""), [vllm_port],
                       {"gateway_hold_timeout": hold}, host_vars=agent)


def server_stat(out):
    lines = admin(out, "show stat").splitlines()
    head = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        row = dict(zip(head, line.split(",")))
        if line and row["svname"] not in ("FRONTEND", "BACKEND"):
            return row
    raise RuntimeError("no server in show stat")


def wait_status(out, want, timeout=60):
    deadline = time.monotonic() + timeout
    while server_stat(out)["status"] != want:
        if time.monotonic() > deadline:
            raise RuntimeError("gateway server not %s: %s" % (want, server_stat(out)))
        time.sleep(0.1)


def plain_request_direct(port):
    """One completion straight to vLLM (what the warmup hook sends before systemd turns the unit active)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=200)
        conn.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                     body=json.dumps({"model": "tiny", "prompt": "warm up", "max_tokens": 4}))
        status = conn.getresponse().status
        conn.close()
        return status == 200
    except (OSError, http.client.HTTPException):
        return False


def plain_request(port):
    """(ok, kind, attempts) of one completion on a new connection, no retry."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=200)
        conn.request("POST", "/v1/completions", headers={"Content-Type": "application/json",
                                                         "Authorization": "Bearer " + KEY},
                     body=json.dumps({"model": "tiny", "prompt": "hello there", "max_tokens": 8}))
        resp = conn.getresponse()
        data = resp.read().decode(errors="replace")
        conn.close()
    except (OSError, http.client.HTTPException) as e:
        return False, type(e).__name__, 1
    if resp.status == 200:
        return True, None, 1
    if resp.status == 503 and "model_unavailable" in data:
        return False, "503 hold expired", 1
    if resp.status == 503:
        return False, "503 no server (HAProxy)", 1
    return False, "%d %s" % (resp.status, data[:60].replace("\n", " ")), 1


class OpenAIClient(object):
    """The openai client with its default retries; attempts = the HTTP requests it sent (its debug log)."""

    def __init__(self, port):
        import logging  # pylint: disable=import-outside-toplevel
        import openai  # pylint: disable=import-outside-toplevel
        self.openai = openai
        self.lock = threading.Lock()
        self.attempts = 0
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key=KEY, timeout=200)
        self.max_retries = self.client.max_retries
        counter = self

        class Count(logging.Handler):
            def emit(self, record):
                if record.msg.startswith("Sending HTTP Request"):
                    with counter.lock:
                        counter.attempts += 1
        log = logging.getLogger("openai._base_client")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.handlers[:] = [Count()]

    def __call__(self):
        with self.lock:
            before = self.attempts
        try:
            self.client.completions.create(model="tiny", prompt="hello there", max_tokens=8)
            return True, None, None
        except self.openai.APIStatusError as e:
            code = "model_unavailable" in str(e.body)
            return False, "%d %s" % (e.status_code, "hold expired" if code else type(e).__name__), None
        except self.openai.APIError as e:
            return False, type(e).__name__, before


def run_case(vllm, gw_out, gw_port, restart, client, requests, concurrency, restart_after, agent=None):
    """Send the requests, restart vLLM once after restart_after of them are done; returns the case's figures."""
    ask = (lambda: plain_request(gw_port)) if client == "plain" else OpenAIClient(gw_port)
    results, lock = [], threading.Lock()
    started = threading.Event()
    info = {}

    def restart_instance():
        server = "%s/%s" % (server_stat(gw_out)["pxname"], server_stat(gw_out)["svname"])
        if restart == "drain":
            admin(gw_out, "set server %s state drain" % server)
            deadline = time.monotonic() + 60
            while int(server_stat(gw_out)["scur"] or 0) and time.monotonic() < deadline:
                time.sleep(0.05)
        t0 = time.monotonic()
        if restart.startswith("agent"):
            agent.state["tiny"] = "down #deactivating"  # ExecStop= runs: the old server still serves
            time.sleep(int(restart[len("agent"):]))
        vllm.stop()
        info["stopped_s"] = round(time.monotonic() - t0, 2)
        if agent:
            agent.state["tiny"] = "down #activating"
        vllm.start()
        vllm.wait_healthy()
        if agent:
            plain_request_direct(vllm.port)  # the warmup hook: one completion, then the unit is active
            agent.state["tiny"] = "up"
        info["restart_s"] = round(time.monotonic() - t0, 1)
        if restart == "drain":
            admin(gw_out, "set server %s state ready" % server)
        wait_status(gw_out, "UP", 60)
        info["gateway_up_s"] = round(time.monotonic() - t0, 1)

    def one(i):
        if i == restart_after:
            started.set()
        t = time.monotonic()
        ok, kind, dummy = ask()
        with lock:
            results.append({"i": i, "ok": ok, "kind": kind, "s": time.monotonic() - t, "end": time.monotonic()})

    restarter = threading.Thread(target=lambda: (started.wait(), restart_instance()))
    restarter.start()
    t_all = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(requests)))
    wall = time.monotonic() - t_all
    restarter.join()
    lat = [r["s"] for r in results]
    kinds = {}
    for r in results:
        if not r["ok"]:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    attempts = len(results) if client == "plain" else ask.attempts
    return {"sent": len(results), "failed": sum(1 for r in results if not r["ok"]), "kinds": kinds,
            "attempts": attempts, "p50_s": round(pct(lat, 0.5), 3), "p99_s": round(pct(lat, 0.99), 2),
            "longest_s": round(max(lat), 2), "wall_s": round(wall, 1), **info}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--restart-after", type=int, default=20, help="restart once this many requests were sent")
    ap.add_argument("--cases", default="all", help="comma-separated indexes into the case list (default: all)")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    cases = CASES if args.cases == "all" else [CASES[int(i)] for i in args.cases.split(",")]
    load0 = os.getloadavg()
    t_start = time.time()
    py = vllm_python()
    model = tiny_model(py)
    workdir = tempfile.mkdtemp(prefix="holdbench-")
    vllm = Vllm(py, model, workdir)
    gateways, rows = {}, []
    try:
        vllm.start()
        t0 = time.monotonic()
        vllm.wait_healthy()
        print("vLLM first start: %.1f s (%s)" % (time.monotonic() - t0, workdir), flush=True)
        agent = Agent()
        for hold, restart, dummy in cases:
            key = (hold, restart.startswith("agent"))
            if key not in gateways:
                gateways[key] = render(workdir, hold, vllm.port, agent.port if key[1] else None)
        for hold, restart, client in cases:
            out, port = gateways[(hold, restart.startswith("agent"))]
            haproxy = subprocess.Popen(["haproxy", "-db", "-f", os.path.join(out, "haproxy.cfg")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(0.5)
                wait_status(out, "UP", 60)
                ok, kind, dummy = plain_request(port)  # warm: the first completion of an engine is slow
                if not ok:
                    raise RuntimeError("warm-up request failed: %s" % kind)
                row = dict(hold_s=hold, restart=restart, client=client,
                           **run_case(vllm, out, port, restart, client, args.requests, args.concurrency,
                                      args.restart_after, agent if restart.startswith("agent") else None))
            finally:
                haproxy.terminate()
                haproxy.wait(10)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        vllm.stop()
    load1 = os.getloadavg()
    head = ("hold", "restart", "client", "sent", "failed", "attempts", "p50 s", "p99 s", "longest s", "restart s",
            "failure kinds")
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| %s | %s | %s | %d | %d | %s | %.3f | %.2f | %.1f | %.1f | %s |" % (
            "%d s" % r["hold_s"] if r["hold_s"] else "off", r["restart"], r["client"] if r["client"] == "plain"
            else "openai (max_retries 2)", r["sent"], r["failed"], r["attempts"], r["p50_s"], r["p99_s"],
            r["longest_s"], r["restart_s"], ", ".join("%s: %d" % kv for kv in sorted(r["kinds"].items())) or "-"))
    print("\nload average (1 min) at start %.2f, at end %.2f; %d CPUs; wall %.0f s" % (
        load0[0], load1[0], os.cpu_count(), time.time() - t_start))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), "cpus": os.cpu_count(),
                       "load_start": load0, "load_end": load1, "requests": args.requests,
                       "concurrency": args.concurrency, "restart_after": args.restart_after, "cases": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
