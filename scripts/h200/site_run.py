# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The collection's own path on the lent H200, under a real systemd (docs/h200.md).

Runs THERE, after ``stage.sh install`` and ``boot-systemd.sh``: every step is
what a user runs (``ansible-playbook ... -i scripts/h200/inventory``), inside the
namespace where systemd is PID 1 (``nsenter -t PID -a``). Steps run in order
until the deadline (argv[1], epoch seconds); the state file keeps the ones done,
so the next device call goes on. Results: WORK/out/*.log, WORK/state.json.

  site_run.py DEADLINE          # RESET=1 starts over; H200_STEPS=a,b picks steps

Issue 35 (opt-in: run only when H200_STEPS names them; after wheelhouse, site1 not
needed): ``big`` generates a Llama-3-8B-shaped model on the host (vllm_tiny_model preset
llama3-8b, on the GPU), starts it cold with the fleet compile cache on and collects the
artifact; ``bigseed`` wipes every cache of the instance, seeds it from that artifact and
starts it; ``bigkept`` restarts it with its caches kept; ``bigkv`` changes
gpu_memory_utilization / max_num_batched_tokens (predicted vs measured KV from the
report); ``bigload`` starts it with each faster loader; ``bigcold`` wipes again and
starts with the share off. Each start: systemd start -> active, the journal's phase
lines, and (with py-spy staged) the engine's stacks from ``Graph capturing finished``
to ``init engine``.

Issue 33 item 4 (opt-in; site1 not needed): ``swap`` runs site.yml with two instances on
the one GPU, both with sleep mode and gpu_memory_utilization 0.4 (tiny: the tiny model;
swapb: BIG_MODEL, generated first when missing), records swapb's cold
start, puts swapb to sleep (level 1; the watchdog must say ``asleep``), then runs
playbooks/swap.yml (sleep tiny, wake swapb): seconds to serving after the wake-up vs the
cold start, GPU memory used at each stage. Each figure is saved as soon as it exists.

Issue 33 items 2 and 5 (opt-in; site1 not needed): ``lora`` writes two PEFT LoRA adapters for the
tiny model on the host (vllm_lora.write_adapter: no download), runs site.yml with the instance
loading them at runtime (VLLM_ALLOW_RUNTIME_LORA_UPDATING, max_loras 2, adapter sql: a restart),
asks each name, then site.yml with sql replaced by chat: the plan's lora_sync (the same MainPID,
chat answers, sql 404, the seconds of the run); /metrics with LoRA on CUDA after each.

Issue 31 (opt-in, after site1): ``hang`` SIGSTOPs the EngineCore, ``hangapi`` the API
server (the watchdog with the role's defaults kills it, systemd restarts it: seconds
until serving again); ``crashloop`` kills each new main process until systemd gives up
(start-limit-hit), then times the watchdog's revival until serving again.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORK = os.environ.get("H200_WORK", "/var/lib/llmops-h200/work")
OUTD = os.path.join(WORK, "out")
STATE = os.path.join(WORK, "state.json")
SITE = os.environ.get("SITE", "/var/lib/llmops-h200/site")
PIDFILE = "/var/lib/llmops-h200/systemd.pid"
INV = os.path.join(REPO, os.environ.get("H200_INV", os.path.join("scripts", "h200", "inventory")))
# The modules' interpreter (the inventory's, for the ansible.cfg-less ad-hoc parts).
PY = os.environ.get("H200_PY", "/opt/torch/.venv/bin/python3")
URL = "http://127.0.0.1:8000"
UNIT = "vllm@tiny.service"
PROMPT = "The quick brown fox jumps over the lazy dog"
# name, seconds the step needs at least (else it waits for the next call).
STEPS = [("preflight", 60), ("wheelhouse", 90), ("site1", 420), ("serve", 30), ("site2", 120), ("check", 120), ("verify", 200),
         ("change", 300), ("rollback", 300), ("fault", 240), ("fixtures", 30),
         ("big", 540), ("bigseed", 300), ("bigkept", 240), ("bigkv", 540), ("bigload", 420), ("bigcold", 300),
         ("hang", 330), ("hangapi", 330), ("crashloop", 420), ("swap", 900), ("lora", 600)]
# Steps that run only when H200_STEPS names them.
OPT_IN = ("big", "bigseed", "bigkept", "bigkv", "bigload", "bigcold", "hang", "hangapi", "crashloop", "swap", "lora")
PYSPY = os.path.join(SITE, "tools", "bin", "py-spy")
# Issue 35: the instance tiny on a Llama-3-8B-shaped model (random weights: start-up and
# memory figures only), the fleet compile cache's controller dir on this host.
CCDIR = "/var/lib/llmops-h200/compile-cache"
BIG_MODEL = "/srv/models/llama3-8b"
BIG = {"vllm_tiny_model_preset": "llama3-8b", "vllm_model_path": BIG_MODEL, "vllm_compile_cache_share": True,
       "vllm_compile_cache_controller_dir": CCDIR,
       "vllm_instances": [{"name": "tiny", "model": BIG_MODEL, "served_model_name": "tiny", "host": "127.0.0.1",
                           "port": 8000, "gpus": [0], "args": {"max_model_len": 8192, "gpu_memory_utilization": 0.9}}]}
# Every cache the instance's start may have written (the state dir keeps the rest).
WIPE = " ".join("/var/lib/vllm/tiny/" + d for d in ("cache/vllm", "cache/xdg", ".triton", ".cache", ".nv"))
START_LINES = re.compile(r"Directly load|Compiling a graph|Compiling model again|saved AOT|torch.compile took|"
                         r"Model loading took|Loading weights took|init engine|KV cache size|Graph capturing finished|"
                         r"Using cache directory|Maximum concurrency|JIT monitor|Available KV cache memory|"
                         r"Starting vLLM|load_format|Loading safetensors|[Ss]treamer|fastsafetensors")


def now():
    return time.time()


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    with open(os.path.join(OUTD, "site_run.txt"), "a") as f:
        f.write(time.strftime("%H:%M:%S ") + line + "\n")


def load():
    if os.environ.get("RESET") == "1" or not os.path.exists(STATE):
        return {"done": {}, "results": {}}
    with open(STATE) as f:
        return json.load(f)


def save(st):
    with open(STATE + ".tmp", "w") as f:
        json.dump(st, f, indent=1, sort_keys=True)
    os.replace(STATE + ".tmp", STATE)


def ns():
    """Into every namespace of the booted systemd, in the checkout (nsenter -a would cd to the target's cwd)."""
    with open(PIDFILE) as f:
        return ["nsenter", "-t", f.read().strip(), "-a", "--wd=" + REPO]


def env():
    # pip reads PIP_* before its config file: only the role's pip.conf may name the sources.
    e = dict((k, v) for k, v in os.environ.items() if not k.startswith("PIP_"))
    coll = os.path.join(WORK, "collections")
    e.update({
        "PYTHONPATH": SITE, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "HOME": "/root",
        "PATH": os.path.join(SITE, "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": coll, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_roles,ansible.builtin.timer",
        "ANSIBLE_PYTHON_INTERPRETER": PY, "PYTHONUNBUFFERED": "1",
    })
    return e


def sh(cmd, timeout=120, inside=True):
    argv = (ns() if inside else []) + ["bash", "-c", cmd]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=timeout, env=env(), check=False)
    return p.returncode, p.stdout


def playbook(name, args, timeout):
    """ansible-playbook inside the systemd namespace; returns rc, seconds, recap {host: counts}."""
    logf = os.path.join(OUTD, name + ".log")
    argv = ns() + [sys.executable, os.path.join(SITE, "bin", "ansible-playbook"), "-i", INV] + args
    t0 = now()
    with open(logf, "w") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env(), timeout=timeout,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    sec = round(now() - t0, 1)
    text = open(logf, errors="replace").read()
    recap = {}
    for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)",
                         text, re.M):
        recap[m.group(1)] = dict(zip(("ok", "changed", "unreachable", "failed", "skipped"),
                                     (int(x) for x in m.groups()[1:])))
    roles = dict((m.group(1).strip(), float(m.group(2))) for m in
                 re.finditer(r"^(\S[^\n]*?) -+ (\d+\.\d+)s$", text.split("PLAY RECAP")[-1], re.M))
    log("%s: rc=%s %.1f s recap=%s" % (name, rc, sec, recap.get("h200")))
    return {"rc": rc, "seconds": sec, "recap": recap.get("h200"), "profile": roles}


def http(path, body=None, timeout=30):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def completion(max_tokens=16):
    t0 = now()
    code, body = http("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens,
                                          "temperature": 0, "ignore_eos": True}, timeout=60)
    return round((now() - t0) * 1000.0, 1), json.loads(body)["usage"]["completion_tokens"]


def serving():
    try:
        code = http("/health", timeout=5)[0]
        return code == 200 and completion(4)[1] > 0
    except Exception:  # noqa: BLE001 - any failure is "not serving yet"
        return False


def gpu_used_mib():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           stdout=subprocess.PIPE, universal_newlines=True, check=False)
        return int(p.stdout.split()[0])
    except (OSError, IndexError, ValueError):
        return None


def step_preflight(st):
    """gpu_preflight on the real nvidia-smi/NVML (first call: before the vLLM wheel is here)."""
    r = playbook("preflight", [os.path.join(REPO, "playbooks", "preflight.yml")], 300)
    text = open(os.path.join(OUTD, "preflight.log"), errors="replace").read()
    r["summary"] = [line.strip()[:700] for line in text.splitlines() if "mode cuda" in line or "KV tokens" in line][:4]
    return r


def step_wheelhouse(st):
    return playbook("wheelhouse", [os.path.join(REPO, "playbooks", "wheelhouse.yml")], 600)


def step_site1(st):
    r = playbook("site1", [os.path.join(REPO, "site.yml")], 900)
    r["gpu_used_mib"] = gpu_used_mib()
    return r


def step_serve(st):
    """First request after the unit is active (the warmup hook ran), then the median of 20."""
    first = completion()[0]
    rest = sorted(completion()[0] for dummy in range(20))
    show = sh("systemctl show %s -p ActiveState,SubState,NRestarts,MainPID,ExecMainStartTimestampMonotonic,"
              "ActiveEnterTimestampMonotonic" % UNIT)[1]
    return {"rc": 0, "first_ms": first, "median_ms": rest[10], "max_ms": rest[-1], "unit": show.strip().splitlines()}


def step_site2(st):
    r = playbook("site2", [os.path.join(REPO, "site.yml")], 600)
    r["ok_expect"] = r["rc"] == 0 and (r["recap"] or {}).get("changed") == 0
    return r


def step_check(st):
    r = playbook("check", [os.path.join(REPO, "site.yml"), "--check", "--diff"], 600)
    r["ok_expect"] = r["rc"] == 0 and (r["recap"] or {}).get("changed") == 0
    return r


def step_verify(st):
    return playbook("verify", [os.path.join(REPO, "playbooks", "verify.yml"), "-e", "verify_tool=vllm_bench",
                               "-e", "verify_slo_p99_ttft_ms=500", "-e", "verify_slo_max_failed=0"], 600)


def step_change(st):
    """A changed option on the serving instance: snapshot, restart, readiness, snapshot dropped."""
    before = sh("systemctl show -p MainPID --value %s" % UNIT)[1].strip()
    r = playbook("change", [os.path.join(REPO, "site.yml"), "-e", json.dumps({"vllm_common_args": {"max_num_seqs": 128}})], 900)
    r["main_pid"] = [before, sh("systemctl show -p MainPID --value %s" % UNIT)[1].strip()]
    r["argv_has_change"] = "--max-num-seqs 128" in sh("systemctl cat %s" % UNIT)[1]
    r["serving"] = serving()
    return r


def step_rollback(st):
    """A change whose engine cannot start on the GPU (the instance env points CUDA at a GPU it
    may not open): the readiness gate fails, the previous files come back, the old config serves."""
    bad = {"vllm_common_args": {"max_num_seqs": 128},
           "vllm_instances": [{"name": "tiny", "model": "/srv/models/tiny", "served_model_name": "tiny",
                               "host": "127.0.0.1", "port": 8000, "gpus": [0], "readiness_timeout": 240,
                               "env": {"CUDA_VISIBLE_DEVICES": "7"},
                               "args": {"max_model_len": 2048, "gpu_memory_utilization": 0.5}}]}
    t0 = now()
    r = playbook("rollback", [os.path.join(REPO, "site.yml"), "-e", json.dumps(bad)], 900)
    r["ok_expect"] = r["rc"] != 0
    r["serving_after"] = serving()
    r["seconds_to_serving_again"] = round(now() - t0, 1)
    r["env_restored"] = "CUDA_VISIBLE_DEVICES=\"7\"" not in open("/etc/vllm/tiny.env").read()
    text = open(os.path.join(OUTD, "rollback.log"), errors="replace").read()
    r["messages"] = [line.strip()[:600] for line in text.splitlines() if "No CUDA GPUs" in line or "rolled back" in line
                     or "restored" in line.lower()][:12]
    return r


def step_fault(st):
    """kill -9 of the EngineCore while serving: systemd brings the unit back."""
    pids = subprocess.run(["pgrep", "-f", "VLLM::EngineCore"], stdout=subprocess.PIPE, universal_newlines=True,
                          check=False).stdout.split()
    if not pids:
        return {"rc": 1, "error": "no EngineCore process", "ps": sh("ps -eo pid,ppid,comm,args | grep -i vllm", inside=False)[1]}
    used_before = gpu_used_mib()
    nrestarts = sh("systemctl show -p NRestarts --value %s" % UNIT)[1].strip()
    t0 = now()
    subprocess.run(["kill", "-9", pids[0]], check=False)
    samples, low, t_down, t_back = [], None, None, None
    while now() - t0 < 220:
        used = gpu_used_mib()
        samples.append((round(now() - t0, 1), used))
        if used is not None and (low is None or used < low[1]):
            low = (round(now() - t0, 1), used)
        up = serving()
        if not up and t_down is None:
            t_down = round(now() - t0, 1)
        if up and t_down is not None:
            t_back = round(now() - t0, 1)
            break
        time.sleep(0.5)
    return {"rc": 0 if t_back else 1, "killed_pid": pids[0], "gpu_used_mib_before": used_before,
            "gpu_used_mib_lowest": low, "gpu_used_mib_after": gpu_used_mib(), "down_at_s": t_down,
            "serving_again_s": t_back, "nrestarts": [nrestarts, sh("systemctl show -p NRestarts --value %s" % UNIT)[1].strip()],
            "samples": samples[::4]}


def serving_quick():
    """/health 200 and a 4-token completion within 5 s each (a hung engine fails it at once, not after 60 s)."""
    try:
        if http("/health", timeout=5)[0] != 200:
            return False
        code, body = http("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0},
                          timeout=5)
        return code == 200 and json.loads(body)["usage"]["completion_tokens"] > 0
    except Exception:  # noqa: BLE001 - any failure is "not serving"
        return False


def unit_props(*names):
    out = sh("systemctl show %s %s" % (UNIT, " ".join("-p " + n for n in names)))[1]
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def until_serving(t0, limit=300):
    while now() - t0 < limit:
        if serving_quick():
            return round(now() - t0, 1)
        time.sleep(0.5)
    return None


def watchdog_lines(since):
    return [ln for ln in sh("journalctl -t vllm-watchdog-tiny --since @%d --no-pager -o cat" % int(since))[1]
            .splitlines() if ln.startswith("vllm_watchdog: ") and ": ready (" not in ln][-12:]


def hang(which):
    """SIGSTOP of the EngineCore (or of the API server): the watchdog (the role's defaults) kills it, systemd
    restarts it; seconds from the stop until serving again."""
    sh("systemctl reset-failed %s" % UNIT)
    if not serving_quick():
        return {"rc": 1, "error": "not serving before the fault"}
    if which == "engine":
        pids = subprocess.run(["pgrep", "-f", "VLLM::EngineCore"], stdout=subprocess.PIPE, universal_newlines=True,
                              check=False).stdout.split()
        if not pids:
            return {"rc": 1, "error": "no EngineCore process"}
        argv = ["kill", "-STOP", pids[0]]
    else:
        argv = None
    n0 = unit_props("NRestarts").get("NRestarts")
    t0 = now()
    if argv:
        subprocess.run(argv, check=False)
    else:
        sh("kill -STOP $(systemctl show -p MainPID --value %s)" % UNIT)
    back = until_serving(t0)
    return {"rc": 0 if back else 1, "stopped": which, "serving_again_s": back,
            "nrestarts": [n0, unit_props("NRestarts").get("NRestarts")], "watchdog": watchdog_lines(t0 - 1),
            "settings": sh("systemctl cat vllm-watchdog@tiny.service | grep -o -- '--failures.*'")[1].strip()[:300]}


def step_hang(st):
    return hang("engine")


def step_hangapi(st):
    return hang("api")


def step_crashloop(st):
    """Each new main process killed at once until systemd gives up (what a client whose first request kills every
    fresh engine does); the watchdog revives the unit: seconds from the give-up until serving again."""
    sh("systemctl reset-failed %s" % UNIT)
    t_start, kills, last = now(), 0, None
    while now() - t_start < 240 and kills < 12:
        p = unit_props("ActiveState", "MainPID")
        if p.get("ActiveState") == "failed":
            break
        pid = p.get("MainPID", "0")
        if pid not in ("0", last):
            sh("kill -9 %s" % pid)
            kills, last = kills + 1, pid
        time.sleep(0.2)
    gave_up = unit_props("ActiveState", "Result")
    t0 = now()
    back = until_serving(t0, 360)
    state = sh("cat /var/lib/vllm-watchdog/tiny.json")[1]
    try:
        state = json.loads(state)
    except ValueError:
        pass
    return {"rc": 0 if back and gave_up.get("ActiveState") == "failed" else 1, "kills": kills,
            "loop_s": round(t0 - t_start, 1), "gave_up": gave_up, "serving_again_after_give_up_s": back,
            "watchdog": watchdog_lines(t_start - 1),
            "state": {k: state.get(k) for k in ("status", "revivals_total", "last_failure_cause")}
            if isinstance(state, dict) else state}


def start_figures(since, unit=UNIT):
    """The unit's last start (systemd: start -> active, warmup hook included) and its compile/load lines."""
    show = sh("systemctl show -p InactiveExitTimestampMonotonic -p ActiveEnterTimestampMonotonic --value %s" % unit)[1]
    mono = [int(x) for x in show.split() if x.isdigit()]
    journal = sh("journalctl -u %s --since @%d --no-pager -o cat" % (unit, since), timeout=60)[1]
    return {"start_to_active_s": round((mono[1] - mono[0]) / 1e6, 1) if len(mono) == 2 and mono[1] > mono[0] else None,
            "journal": [line.strip()[:300] for line in journal.splitlines() if START_LINES.search(line)][-40:],
            "gpu_used_mib": gpu_used_mib(), "serving": serving()}


def report_kv():
    """The newest report of the instance: KV predicted before the start vs measured, ready_after_s."""
    files = sorted(f for f in os.listdir(os.path.join(REPO, "reports")) if f.startswith("report-")) \
        if os.path.isdir(os.path.join(REPO, "reports")) else []
    if not files:
        return {}
    with open(os.path.join(REPO, "reports", files[-1])) as f:
        rows = json.load(f)["hosts"].get("h200") or [{}]
    row = rows[0]
    pred, meas = row.get("kv_cache_predicted_tokens"), row.get("kv_cache_size_tokens")
    return {"report": files[-1], "kv_predicted": pred, "kv_measured": meas, "ready_after_s": row.get("ready_after_s"),
            "kv_error_tokens": pred - meas if pred and meas else None,
            "kv_error_pct": round(100.0 * (pred - meas) / meas, 2) if pred and meas else None}


def spy(name, since, stop):
    """py-spy dumps of the EngineCore from 'Graph capturing finished' until 'init engine' (60 s at most)."""
    dumps, pid, t_graph = [], None, None
    while not stop.is_set() and os.path.exists(PYSPY):
        journal = sh("journalctl -u %s --since @%d --no-pager -o cat" % (UNIT, since), timeout=30)[1]
        if t_graph is None:
            m = re.search(r"\(EngineCore pid=(\d+)\)[^\n]*Graph capturing finished", journal)
            if m:
                pid, t_graph = m.group(1), now()
            else:
                time.sleep(1)
                continue
        if "init engine" in journal.split("Graph capturing finished")[-1] or now() - t_graph > 60:
            break
        dumps.append("== +%.1f s\n%s" % (now() - t_graph, sh("%s dump --pid %s" % (PYSPY, pid), timeout=30)[1]))
        time.sleep(1.5)
    if dumps:
        with open(os.path.join(OUTD, "pyspy-%s.txt" % name), "w") as f:
            f.write("\n".join(dumps))


def big_run(name, extra, timeout=1200, wipe=True, restart_only=False):
    """Stop the instance (wipe its caches), run site.yml with ``extra`` (or only restart it); figures of the start."""
    t0 = int(now())
    if wipe:
        sh("systemctl stop %s; rm -rf %s" % (UNIT, WIPE), timeout=180)
    stop = threading.Event()
    spy_thread = threading.Thread(target=spy, args=(name, t0, stop), daemon=True)
    spy_thread.start()
    if restart_only:
        t1 = now()
        rc = sh("systemctl restart %s" % UNIT, timeout=timeout)[0]
        r = {"rc": rc, "seconds": round(now() - t1, 1)}
    else:
        r = playbook(name, [os.path.join(REPO, "site.yml"), "-e", json.dumps(extra)], timeout)
    stop.set()
    spy_thread.join(60)
    r.update(start_figures(t0))
    if not restart_only:
        text = open(os.path.join(OUTD, name + ".log"), errors="replace").read()
        r["compile_cache_plan"] = re.findall(r"vllm@tiny: key [^\n\"]*", text)[:4]
        r.update(report_kv())
    r["controller"] = sh("ls -la %s 2>&1" % CCDIR)[1].strip().splitlines()[-4:]
    r["pyspy"] = os.path.exists(os.path.join(OUTD, "pyspy-%s.txt" % name))
    return r


def big_args(**args):
    """BIG with the instance's args updated."""
    inst = dict(BIG["vllm_instances"][0], args=dict(BIG["vllm_instances"][0]["args"], **args))
    return dict(BIG, vllm_instances=[inst])


def generate_big():
    """The Llama-3-8B-shaped model generated on the GPU by the module (random weights); its figures."""
    t0 = now()
    rc, out = sh("%s %s localhost -i localhost, -c local -e ansible_python_interpreter=%s -m llmops.serving.vllm_tiny_model "
                 "-a '%s'" % (sys.executable, os.path.join(SITE, "bin", "ansible"), PY,
                              json.dumps({"path": BIG_MODEL, "preset": "llama3-8b"})), timeout=1500)
    gen = dict((k, v) for k, v in re.findall(r"^ {4}\"?(bytes_written|seconds|device|parameters|tokenizer_padded)\"?: "
                                             r"\"?([^\s\",]+)", out, re.M))
    gen.update(rc=rc, wall_s=round(now() - t0, 1), shards=sh("ls -la %s" % BIG_MODEL)[1].strip().splitlines(),
               tail=out.strip().splitlines()[-6:] if rc else [])
    return gen


def step_big(st):
    """The model generated on the GPU (the module's figures, the image's torch), then site.yml: cold start, collect."""
    gen = generate_big()
    r = big_run("big", BIG)
    r["generate"] = gen
    return r


def step_bigseed(st):
    """Every cache wiped; the seed phase unpacks the artifact collected by ``big``; the start loads it."""
    return big_run("bigseed", BIG)


def step_bigkept(st):
    """A plain restart with the host's caches kept (the third start figure)."""
    return big_run("bigkept", BIG, wipe=False, restart_only=True)


def big_variants(prefix, variants):
    """One start per (label, args) on top of BIG, caches kept; rc: the worst."""
    out = dict((label, big_run(prefix + label, big_args(**args), wipe=False)) for label, args in variants)
    out["rc"] = max(v.get("rc", 99) for v in out.values())
    return out


def step_bigkv(st):
    """KV predicted (the role, before the start) vs measured at two gpu_memory_utilization x two
    max_num_batched_tokens (big/bigseed measured 0.9 x vLLM's default); caches kept."""
    return big_variants("bigkv-", [("gmu0.6-mnbtdefault", {"gpu_memory_utilization": 0.6}),
                                   ("gmu0.6-mnbt2048", {"gpu_memory_utilization": 0.6, "max_num_batched_tokens": 2048}),
                                   ("gmu0.9-mnbt2048", {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048})])


def step_bigload(st):
    """The same model with the faster loaders vLLM supports from local disk (caches kept)."""
    return big_variants("bigload-", [(fmt, {"load_format": fmt}) for fmt in ("fastsafetensors", "runai_streamer")])


def step_bigcold(st):
    """Every cache wiped, the share off: a cold start to compare with ``bigseed``."""
    return big_run("bigcold", dict(BIG, vllm_compile_cache_share=False))


SWAP_B = {"name": "swapb", "port": 8001}


def swap_extra():
    """site.yml -e of the swap step: two sleep-mode instances on GPU 0, 0.4 of its memory each: tiny (the
    tiny model, put to sleep) and swapb (the 8B-shaped model, whose cold start the wake-up is compared with)."""
    def inst(name, model, port):
        return {"name": name, "model": model, "served_model_name": name, "host": "127.0.0.1", "port": port,
                "gpus": [0], "readiness_timeout": 600,
                "args": {"max_model_len": 2048, "gpu_memory_utilization": 0.4, "enable_sleep_mode": True}}
    return {"vllm_instances": [inst("tiny", "/srv/models/tiny", 8000),
                               inst(SWAP_B["name"], BIG_MODEL, SWAP_B["port"])]}


def adhoc(module, args, timeout=600):
    """One module through the ad-hoc ``ansible`` CLI on this host (the vLLM venv's interpreter): rc, its result."""
    rc, out = sh("%s %s localhost -i localhost, -c local -e ansible_python_interpreter=/opt/vllm/venv/bin/python "
                 "-m %s -a '%s'" % (sys.executable, os.path.join(SITE, "bin", "ansible"), module, json.dumps(args)),
                 timeout=timeout)
    try:
        return rc, json.JSONDecoder().raw_decode(out[out.index("{"):])[0]  # the timer callback's line follows
    except ValueError:
        return rc, {"output": out.strip().splitlines()[-8:]}


def served_at(port, model):
    """A 4-token completion on 127.0.0.1:PORT within 10 s."""
    try:
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 4}).encode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())["usage"]["completion_tokens"] > 0
    except Exception:  # noqa: BLE001 - any failure is "not serving"
        return False


def step_swap(st):
    """Issue 33 item 4: swapb's cold start vs its wake-up (playbooks/swap.yml) on the GPU tiny sleeps on."""
    r = {"rc": 1, "model_tiny": "/srv/models/tiny", "model_swapb": BIG_MODEL}
    unit_b = "vllm@%s.service" % SWAP_B["name"]

    def keep(part, value):  # every figure saved as soon as it exists (a later part may fail or run out of time)
        r[part] = value
        st["results"]["swap"] = r
        save(st)
        log("swap %s: %s" % (part, json.dumps(value)[:600]))

    if not os.path.exists(os.path.join(BIG_MODEL, "config.json")):
        keep("generate_swapb_model", generate_big())
    sh("systemctl stop %s %s" % (UNIT, unit_b), timeout=180)
    keep("gpu_used_mib_none", gpu_used_mib())
    t0 = int(now())
    site = playbook("swap-site", [os.path.join(REPO, "site.yml"), "-e", json.dumps(swap_extra())], 900)
    keep("site", site)
    keep("tiny_cold", start_figures(t0))
    keep("swapb_cold", dict(start_figures(t0, unit_b), serving=served_at(SWAP_B["port"], SWAP_B["name"])))
    keep("gpu_used_mib_both_awake", gpu_used_mib())
    if site["rc"] != 0:
        return r
    url_b = "http://127.0.0.1:%d" % SWAP_B["port"]
    rc, out = adhoc("llmops.serving.vllm_sleep", {"url": url_b, "state": "asleep", "level": 1, "instance": SWAP_B["name"]})
    keep("swapb_sleep", dict(rc=rc, **dict((k, out.get(k)) for k in ("seconds", "sleeping", "msg", "output"))))
    keep("gpu_used_mib_swapb_asleep", gpu_used_mib())
    time.sleep(25)  # two watchdog rounds: a sleeping engine must be "asleep", not killed
    keep("swapb_watchdog_asleep", {"state": sh("cat /var/lib/vllm-watchdog/swapb.json")[1].strip()[:600],
                                   "nrestarts": sh("systemctl show -p NRestarts --value %s" % unit_b)[1].strip()})
    swap = playbook("swap", [os.path.join(REPO, "playbooks", "swap.yml"), "-e", json.dumps(swap_extra()),
                             "-e", "swap_sleep=tiny", "-e", "swap_wake=" + SWAP_B["name"]], 420)
    text = open(os.path.join(OUTD, "swap.log"), errors="replace").read()
    m = re.search(r"tiny asleep \(level 1\) in ([\d.]+) s; swapb awake in ([\d.]+) s, serving ([\d.]+) s", text)
    swap.update(tiny_sleep_s=float(m.group(1)) if m else None, swapb_wake_s=float(m.group(2)) if m else None,
                swapb_seconds_to_serving=float(m.group(3)) if m else None)
    keep("swap", swap)
    keep("gpu_used_mib_tiny_asleep_swapb_awake", gpu_used_mib())
    keep("after", {"swapb_serving": served_at(SWAP_B["port"], SWAP_B["name"]),
                   "tiny_is_sleeping": sh("curl -s http://127.0.0.1:8000/is_sleeping")[1].strip()[:200]})
    cold = (r.get("swapb_cold") or {}).get("start_to_active_s")
    used = [r.get(k) for k in ("gpu_used_mib_both_awake", "gpu_used_mib_swapb_asleep",
                               "gpu_used_mib_tiny_asleep_swapb_awake")]
    keep("figures", {"swapb_cold_start_to_active_s": cold, "swapb_wake_to_serving_s": swap["swapb_seconds_to_serving"],
                     "gpu_used_mib_awake_asleep_swapped": used})
    r["rc"] = 0 if swap["rc"] == 0 and r["after"]["swapb_serving"] else 1
    return r


def lora_extra(names):
    """site.yml -e: the instance tiny loading the adapters ``names`` at runtime (max_loras fixed: a change of the
    list alone is not a change of --max-loras)."""
    return {"vllm_instances": [{
        "name": "tiny", "model": "/srv/models/tiny", "served_model_name": "tiny", "host": "127.0.0.1", "port": 8000,
        "gpus": [0], "env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        "args": {"max_model_len": 2048, "gpu_memory_utilization": 0.5, "max_loras": 2},
        "lora_adapters": [{"name": n, "path": "/srv/lora/" + n} for n in names]}]}


def status_of(model):
    """HTTP status of a 4-token completion asking ``model`` (an adapter's name or the base model)."""
    try:
        return http("/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 4}, timeout=60)[0]
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:  # noqa: BLE001 - not answering at all
        return -1


def step_lora(st):
    """Issue 33 items 2 and 5 on CUDA under systemd: adapters served by name, then a change of the list alone
    loaded and unloaded at runtime by the role (no restart)."""
    r = {"rc": 1}
    fx = os.path.join(OUTD, "fixtures")
    os.makedirs(fx, exist_ok=True)

    def keep(part, value):
        r[part] = value
        st["results"]["lora"] = r
        save(st)
        log("lora %s: %s" % (part, json.dumps(value)[:600]))

    def pid():
        return sh("systemctl show -p MainPID --value %s" % UNIT)[1].strip()

    def metrics(name):
        out = sh("curl -s %s/metrics" % URL)[1]
        with open(os.path.join(fx, name), "w") as f:
            f.write(out)
        return [line for line in out.splitlines() if line.startswith("vllm:lora_requests_info")]

    if not os.path.exists("/srv/models/tiny/config.json"):
        keep("site_first", playbook("lora-site0", [os.path.join(REPO, "site.yml")], 900))
    code = ("import sys; sys.path.insert(0, %r); "
            "from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora; "
            "[vllm_lora.write_adapter('/srv/lora/' + n, '/srv/models/tiny', rank=8) for n in ('sql', 'chat')]"
            % os.path.join(WORK, "collections"))
    keep("write_adapters", sh("umask 022 && %s -c \"%s\" && ls -la /srv/lora/sql" % (PY, code))[0])
    before, t0 = pid(), int(now())
    on = playbook("lora-on", [os.path.join(REPO, "site.yml"), "-e", json.dumps(lora_extra(["sql"]))], 900)
    keep("on", dict(on, main_pid=[before, pid()], start=start_figures(t0),
                    answers=dict((m, status_of(m)) for m in ("tiny", "sql", "chat")),
                    models=sh("curl -s %s/v1/models" % URL)[1][:1500]))
    if on["rc"] != 0:
        return r
    for dummy in range(3):
        status_of("sql")
    keep("metrics_on", metrics("metrics-lora-cuda-on.txt"))
    before = pid()
    swap = playbook("lora-swap", [os.path.join(REPO, "site.yml"), "-e", json.dumps(lora_extra(["chat"]))], 600)
    text = open(os.path.join(OUTD, "lora-swap.log"), errors="replace").read()
    keep("swap", dict(swap, main_pid=[before, pid()],
                      answers=dict((m, status_of(m)) for m in ("tiny", "sql", "chat")),
                      synced=[line.strip()[:200] for line in text.splitlines() if "LoRA adapters" in line
                              or "lora_synced" in line][:12],
                      argv_lists_chat='\\"name\\": \\"chat\\"' in sh("systemctl cat %s" % UNIT)[1]))
    keep("metrics_swap", metrics("metrics-lora-cuda-swap.txt"))
    ok = (swap["rc"] == 0 and r["swap"]["main_pid"][0] == r["swap"]["main_pid"][1]
          and r["swap"]["answers"] == {"tiny": 200, "sql": 404, "chat": 200})
    keep("figures", {"on_seconds": on["seconds"], "swap_seconds": swap["seconds"], "no_restart": ok,
                     "on_start_to_active_s": (r["on"]["start"] or {}).get("start_to_active_s")})
    r["rc"] = 0 if ok else 1
    return r


def step_fixtures(st):
    fx = os.path.join(OUTD, "fixtures")
    os.makedirs(fx, exist_ok=True)
    cmds = {
        "proc-devices.txt": "cat /proc/devices",
        "ls-dev-nvidia.txt": "ls -l /dev/nvidia* /dev/nvidia-caps/* 2>&1",
        "systemctl-cat-vllm@tiny.txt": "systemctl cat %s" % UNIT,
        "systemctl-show-vllm@tiny.txt": "systemctl show %s" % UNIT,
        "journal-vllm@tiny.txt": "journalctl -u %s --no-pager -n 400" % UNIT,
        "instance-env-keys.txt": "sed -E 's/=.*//' /etc/vllm/tiny.env",
        "venv.txt": "ls -la /opt/vllm/venvs; cat /opt/vllm/venv/.llmops-venv.json; "
                    "cat /opt/vllm/venv/lib/python3.12/site-packages/_llmops_inherit.pth",
        "systemd-version.txt": "systemctl --version | head -1; systemctl is-system-running",
    }
    for name, cmd in cmds.items():
        with open(os.path.join(fx, name), "w") as f:
            f.write(sh(cmd, inside=not name.startswith("proc-"))[1])
    for src in ("reports",):
        if os.path.isdir(os.path.join(REPO, src)):
            shutil.copytree(os.path.join(REPO, src), os.path.join(fx, src), dirs_exist_ok=True)
    return {"rc": 0, "files": sorted(os.listdir(fx))}


def main():
    deadline = float(sys.argv[1])
    os.makedirs(OUTD, exist_ok=True)
    coll = os.path.join(WORK, "collections", "ansible_collections")
    os.makedirs(os.path.join(coll, "llmops"), exist_ok=True)
    if not os.path.islink(os.path.join(coll, "llmops", "serving")):
        os.symlink(REPO, os.path.join(coll, "llmops", "serving"))
    st = load()
    pick = [s for s in os.environ.get("H200_STEPS", "").split(",") if s]
    for name, need in STEPS:
        if (pick and name not in pick) or (name in OPT_IN and name not in pick):
            continue
        if name in st["done"]:
            continue
        left = deadline - now()
        if left < need:
            log("stop before %s: %d s left, it needs %d" % (name, left, need))
            break
        log("== %s (%d s left)" % (name, left))
        try:
            res = globals()["step_" + name](st)
        except Exception as e:  # noqa: BLE001 - record and go on to the next call
            # the figures a step saved before it failed (swap saves each as it goes) are kept
            res = dict(st["results"].get(name) or {}, rc=99, error="%s: %s" % (type(e).__name__, e))
        st["results"][name] = res
        st["done"][name] = round(now(), 1)
        save(st)
        log(json.dumps(res)[:1500])
        if name == "site1" and (res.get("rc") != 0 or not res.get("recap")):
            log("site1 failed: the later steps need a serving instance; stopping")
            break
    save(st)


if __name__ == "__main__":
    main()
