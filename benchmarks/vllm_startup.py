# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vLLM startup benchmark against a DEPLOYED vllm@NAME systemd unit (issue 2).

Prints figures, asserts nothing. Per repeat it measures:

  cold    systemctl stop; t0; systemctl start --no-block
  kept    t0; systemctl restart --no-block     (compile cache VLLM_CACHE_ROOT kept)
  wiped   rm the CONTENTS of VLLM_CACHE_ROOT as root; t0; systemctl restart --no-block

and for each start:
  * t0 -> "Application startup complete." in the journal of THIS invocation
    (journal __REALTIME_TIMESTAMP - controller time at t0; target and controller share
    the kernel clock: local or `docker exec`);
  * t0 -> /health 200, t0 -> ready (/health 200 AND a completion returning tokens),
    polled from this machine against --url;
  * t0 -> unit `active` (ActiveEnterTimestampMonotonic; the ExecStartPost warmup hook
    runs before it) and the same from the unit's own clock:
    ExecMainStartTimestampMonotonic -> startup complete / -> active;
  * after the cold start: latency of the first completion once the unit is active vs
    the median of the next --followers (20) completions, plus the latency of the very
    first completion the ready probe got through.

Commands run on the target locally (optionally with --sudo) or through
`docker exec CONTAINER` (--docker CONTAINER). Only the stdlib is needed.

Example (demo node from `make demo`):
  python3 benchmarks/vllm_startup.py --docker llmops-demo --name default \
      --url http://127.0.0.1:8000 --model tiny --repeat 3 --json /tmp/startup.json
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

STARTUP_COMPLETE = "Application startup complete."
SHOW_PROPS = ("InvocationID", "ActiveState", "SubState", "Result", "MainPID", "InactiveExitTimestampMonotonic",
              "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic", "Environment")


# --------------------------------------------------------------------------- parsing helpers
def parse_systemctl_show(text):
    """`systemctl show -p A -p B UNIT` output (KEY=VALUE lines) -> dict of strings."""
    out = {}
    for line in text.splitlines():
        if "=" in line:
            key, _sep, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def parse_environment(value):
    """systemd `Environment=` property (space-separated, shell-quoted when needed) -> dict."""
    env = {}
    for item in shlex.split(value or ""):
        if "=" in item:
            k, _sep, v = item.partition("=")
            env[k] = v
    return env


def monotonic_us(props, key):
    """A *TimestampMonotonic property in microseconds, or None when unset (0 or empty)."""
    try:
        value = int(props.get(key) or 0)
    except ValueError:
        return None
    return value or None


def find_journal_entry(json_lines, needle, invocation_id=None):
    """First entry of `journalctl -o json` output whose MESSAGE contains needle.

    Returns {"message", "realtime_us", "monotonic_us", "pid"} or None. Lines that are
    not JSON (journalctl notices such as "-- No entries --") are skipped; MESSAGE given
    as a byte array (journald does that for non-UTF-8 text) is decoded.
    """
    for line in json_lines.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        msg = entry.get("MESSAGE")
        if isinstance(msg, list):
            msg = bytes(msg).decode("utf-8", "replace")
        if not isinstance(msg, str) or needle not in msg:
            continue
        if invocation_id and entry.get("_SYSTEMD_INVOCATION_ID") not in (None, invocation_id):
            continue
        return {"message": msg, "realtime_us": int(entry["__REALTIME_TIMESTAMP"]),
                "monotonic_us": int(entry["__MONOTONIC_TIMESTAMP"]), "pid": entry.get("_PID")}
    return None


def timeline(t0_us, entry, props, health_us=None, ready_us=None):
    """Seconds from t0 (controller CLOCK_REALTIME, us) and from the unit's main-process start.

    entry: find_journal_entry() result (carries the realtime/monotonic pair used to
    map systemd's monotonic timestamps onto the realtime clock).
    """
    def s(x):
        return None if x is None else round(x / 1e6, 3)

    main_mono = monotonic_us(props, "ExecMainStartTimestampMonotonic")
    active_mono = monotonic_us(props, "ActiveEnterTimestampMonotonic")
    out = {"cmd_to_health_s": s(health_us - t0_us) if health_us else None,
           "cmd_to_ready_s": s(ready_us - t0_us) if ready_us else None,
           "cmd_to_startup_complete_s": None, "cmd_to_active_s": None, "cmd_to_main_start_s": None,
           "main_to_startup_complete_s": None, "main_to_active_s": None, "warmup_hook_s": None}
    if entry:
        offset = entry["realtime_us"] - entry["monotonic_us"]  # realtime = monotonic + offset
        out["cmd_to_startup_complete_s"] = s(entry["realtime_us"] - t0_us)
        if main_mono:
            out["main_to_startup_complete_s"] = s(entry["monotonic_us"] - main_mono)
            out["cmd_to_main_start_s"] = s(main_mono + offset - t0_us)
        if active_mono:
            out["cmd_to_active_s"] = s(active_mono + offset - t0_us)
            out["warmup_hook_s"] = s(active_mono - entry["monotonic_us"])
    if main_mono and active_mono:
        out["main_to_active_s"] = s(active_mono - main_mono)
    return out


def completion_tokens(body):
    """Number of generated tokens in an OpenAI /v1/completions response body (dict)."""
    usage = body.get("usage") or {}
    n = usage.get("completion_tokens")
    if isinstance(n, int):
        return n
    choices = body.get("choices") or []
    return 1 if choices and choices[0].get("text") else 0


# --------------------------------------------------------------------------- target access
class Target:
    def __init__(self, docker=None, sudo=False):
        self.docker, self.sudo = docker, sudo

    def run(self, argv, check=True, timeout=120):
        if self.docker:
            argv = ["docker", "exec", self.docker] + argv
        elif self.sudo:
            argv = ["sudo", "-n"] + argv
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and p.returncode != 0:
            raise RuntimeError("%s failed rc=%s: %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
        return p

    def show(self, unit):
        argv = ["systemctl", "show", unit]
        for p in SHOW_PROPS:
            argv += ["-p", p]
        return parse_systemctl_show(self.run(argv).stdout)


class Http:
    def __init__(self, url, model, api_key=None, max_tokens=16, timeout=30):
        self.url, self.model, self.max_tokens, self.timeout = url.rstrip("/"), model, max_tokens, timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def health(self):
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + "/health", headers=self.headers),
                                        timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def complete(self, prompt="The capital of France is"):
        """-> (latency_s, tokens); tokens 0 on any error."""
        data = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=data, headers=self.headers)
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                body = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return time.perf_counter() - t, 0
        return time.perf_counter() - t, completion_tokens(body)


def now_us():
    return int(time.time() * 1e6)


# --------------------------------------------------------------------------- one start
def measure_start(tgt, http, unit, mode, cache_dir, timeout, poll):
    """mode: cold | kept | wiped. Returns a dict of figures."""
    if mode == "cold":
        tgt.run(["systemctl", "stop", unit], timeout=180)
        verb = "start"
    else:
        verb = "restart"
    if mode == "wiped":
        tgt.run(["find", cache_dir, "-mindepth", "1", "-delete"], check=False)
    before = tgt.show(unit)
    old_inv = before.get("InvocationID") if verb == "restart" else None
    if mode == "wiped":
        left = tgt.run(["find", cache_dir, "-mindepth", "1"], check=False).stdout.split()
        if left:
            raise RuntimeError("cache dir %s not empty after wipe: %s" % (cache_dir, left[:5]))

    # The unit has StartLimitBurst=5 per StartLimitIntervalSec=900: a benchmark starts it more
    # often than that, so clear the start-rate counter (and any failed state) before each start.
    tgt.run(["systemctl", "reset-failed", unit], check=False)
    load_before = os.getloadavg()[0]  # same kernel as the target (local or docker exec)
    t0 = now_us()
    tgt.run(["systemctl", verb, "--no-block", unit])
    deadline = time.monotonic() + timeout

    # For a restart the old process may still answer until it is stopped: wait for the new invocation.
    props = before
    while True:
        props = tgt.show(unit)
        if props.get("InvocationID") and props.get("InvocationID") != old_inv and \
                props.get("ActiveState") in ("activating", "active"):
            break
        if props.get("ActiveState") == "failed" or time.monotonic() > deadline:
            raise RuntimeError("%s: no new invocation running (%s/%s, Result=%s)" % (
                unit, props.get("ActiveState"), props.get("SubState"), props.get("Result")))
        time.sleep(poll)
    inv = props["InvocationID"]

    health_us = ready_us = None
    probe_latency = None
    while ready_us is None:
        if time.monotonic() > deadline:
            raise RuntimeError("%s: not ready after %ss" % (unit, timeout))
        if health_us is None:
            if http.health():
                health_us = now_us()
            else:
                time.sleep(poll)
                continue
        lat, toks = http.complete()
        if toks > 0:
            ready_us, probe_latency = now_us(), lat
        else:
            time.sleep(poll)

    while True:
        props = tgt.show(unit)
        if props.get("ActiveState") == "active" and monotonic_us(props, "ActiveEnterTimestampMonotonic"):
            break
        if props.get("ActiveState") in ("failed", "inactive") or time.monotonic() > deadline:
            raise RuntimeError("%s did not turn active: %s" % (unit, props.get("ActiveState")))
        time.sleep(poll)

    entry = None
    for _try in range(50):  # journald may lag the HTTP port by a moment
        j = tgt.run(["journalctl", "--no-pager", "-o", "json", "-u", unit, "_SYSTEMD_INVOCATION_ID=" + inv],
                    check=False).stdout
        entry = find_journal_entry(j, STARTUP_COMPLETE, inv)
        if entry:
            break
        time.sleep(0.2)
    res = {"mode": mode, "invocation_id": inv, "ready_probe_completion_s": round(probe_latency, 4),
           "load1_before": round(load_before, 2), "load1_after": round(os.getloadavg()[0], 2)}
    res.update(timeline(t0, entry, props, health_us, ready_us))
    return res


def measure_latency(http, followers):
    first, toks = http.complete()
    if toks <= 0:
        raise RuntimeError("first completion after active returned no tokens")
    rest = []
    for _i in range(followers):
        lat, toks = http.complete()
        if toks <= 0:
            raise RuntimeError("completion returned no tokens")
        rest.append(lat)
    return {"first_after_active_s": round(first, 4), "median_next_s": round(statistics.median(rest), 4),
            "followers": followers, "first_over_median": round(first / statistics.median(rest), 2)}


# --------------------------------------------------------------------------- report
COLS = [("cmd_to_startup_complete_s", "cmd->startup"), ("cmd_to_health_s", "cmd->health"),
        ("cmd_to_ready_s", "cmd->ready"), ("cmd_to_active_s", "cmd->active"),
        ("main_to_startup_complete_s", "main->startup"), ("main_to_active_s", "main->active"),
        ("warmup_hook_s", "startup->active")]


def fmt(v):
    return "-" if v is None else "%.2f" % v


def summarize(runs):
    out = {}
    for mode in ("cold", "kept", "wiped"):
        rs = [r for r in runs if r["mode"] == mode]
        if not rs:
            continue
        out[mode] = {}
        for key, _head in COLS:
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                out[mode][key] = {"median": round(statistics.median(vals), 3), "min": min(vals), "max": max(vals)}
    return out


def print_table(runs, summary, lat):
    head = "%-6s %-3s " % ("mode", "#") + " ".join("%15s" % h for _key, h in COLS) + " %6s" % "load1"
    print(head)
    print("-" * len(head))
    for mode in ("cold", "kept", "wiped"):
        for i, r in enumerate([r for r in runs if r["mode"] == mode], 1):
            print("%-6s %-3s " % (mode, i) + " ".join("%15s" % fmt(r.get(k)) for k, _head in COLS)
                  + " %6s" % fmt(r.get("load1_before")))
        if mode in summary:
            print("%-6s %-3s " % (mode, "med") + " ".join(
                "%15s" % fmt(summary[mode].get(k, {}).get("median")) for k, _head in COLS))
    print("(seconds; cmd = systemctl start/restart issued; main = ExecMainStartTimestampMonotonic; "
          "startup = 'Application startup complete.'; ready = /health 200 + completion with tokens; "
          "active = ActiveEnterTimestampMonotonic, after the ExecStartPost warmup; "
          "load1 = 1-min load average when the command was issued)")
    if lat:
        print()
        print("%-4s %18s %18s %10s %22s" % ("#", "first_after_active", "median_next_%d" % lat[0]["followers"],
                                            "ratio", "ready_probe_completion"))
        for i, x in enumerate(lat, 1):
            print("%-4s %18.4f %18.4f %10.2f %22.4f" % (i, x["first_after_active_s"], x["median_next_s"],
                                                        x["first_over_median"], x["ready_probe_completion_s"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="default", help="instance NAME of vllm@NAME.service")
    ap.add_argument("--unit", help="full unit name (default vllm@NAME.service)")
    ap.add_argument("--docker", metavar="CONTAINER", help="run target commands via docker exec CONTAINER")
    ap.add_argument("--sudo", action="store_true", help="local target: prefix commands with sudo -n")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="tiny", help="served model name")
    ap.add_argument("--api-key-env", default="VLLM_API_KEY", help="env var holding the API key, if any")
    ap.add_argument("--cache-dir", help="compile cache dir (default: VLLM_CACHE_ROOT from the unit)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--followers", type=int, default=20, help="completions after the first one")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--modes", nargs="+", default=["cold", "kept", "wiped"], choices=["cold", "kept", "wiped"])
    ap.add_argument("--timeout", type=float, default=900, help="per start, seconds")
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args(argv)

    unit = a.unit or "vllm@%s.service" % a.name
    tgt = Target(a.docker, a.sudo)
    http = Http(a.url, a.model, os.environ.get(a.api_key_env), a.max_tokens)
    props = tgt.show(unit)
    cache_dir = a.cache_dir or parse_environment(props.get("Environment")).get("VLLM_CACHE_ROOT")
    if "wiped" in a.modes and not cache_dir:
        ap.error("%s sets no VLLM_CACHE_ROOT; pass --cache-dir" % unit)
    if "wiped" in a.modes and not cache_dir.startswith("/var/lib/vllm/") and not a.cache_dir:
        ap.error("refusing to wipe %s (not under /var/lib/vllm/); pass --cache-dir explicitly" % cache_dir)

    runs, lat = [], []
    for i in range(a.repeat):
        for mode in a.modes:
            r = measure_start(tgt, http, unit, mode, cache_dir, a.timeout, a.poll)
            r["repeat"] = i + 1
            runs.append(r)
            print("repeat %d %-5s cmd->ready %ss cmd->active %ss load1 %.1f->%.1f"
                  % (i + 1, mode, fmt(r["cmd_to_ready_s"]), fmt(r["cmd_to_active_s"]), r["load1_before"],
                     r["load1_after"]), file=sys.stderr)
            if mode == "cold":
                x = measure_latency(http, a.followers)
                x["ready_probe_completion_s"] = r["ready_probe_completion_s"]
                lat.append(x)
    summary = summarize(runs)
    print_table(runs, summary, lat)
    if a.json:
        doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "controller": platform.node(), "unit": unit, "docker": a.docker, "url": a.url, "model": a.model,
               "cache_dir": cache_dir, "repeat": a.repeat, "cpu_count": os.cpu_count(),
               "runs": runs, "summary": summary, "latency": lat}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
        print("wrote %s" % a.json, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
