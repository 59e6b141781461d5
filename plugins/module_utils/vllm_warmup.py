#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Warm a vLLM server with traffic shaped like production, and measure it.

One implementation, two uses:

- the ``llmops.serving.vllm_warmup`` module imports it (module_utils);
- on a host without Ansible it runs as the service's warmup hook
  (``ExecStartPost``): ``python vllm_warmup.py --url ... --model ...``.
  It therefore imports nothing from Ansible and nothing from this collection;
  it needs only the standard library and ``requests`` (present in every
  vLLM venv).

Requests are streamed ``/v1/completions`` calls whose prompts are token-id
lists (exact prompt lengths, no tokenizer needed; ``prompt_format: text``
sends words instead). The first request runs alone (cold); the rest run
with ``concurrency`` threads (warm). Per request: TTFT (first streamed
token), end-to-end latency, tokens. Summary: p50/p99 of TTFT and e2e for
warm requests, cold request figures, errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import requests
    HAS_REQUESTS = True
    REQUESTS_IMPORT_ERROR = None
except ImportError as _e:  # pragma: no cover - depends on the interpreter
    HAS_REQUESTS = False
    REQUESTS_IMPORT_ERROR = _e

# Token ids used for token-id prompts: within the vocabulary of any real
# tokenizer (and the 2048-token tiny test model), away from special ids.
TOKEN_ID_LOW = 100
TOKEN_ID_HIGH = 1000


# Exit statuses of the CLI (the ExecStartPost hook): systemd fails the start on
# any non-zero one and its Restart= policy takes over.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_MAIN_GONE, EXIT_ENGINE_FATAL, EXIT_TIMEOUT = 0, 1, 2, 3, 4, 5

# Words of vLLM's answer when its engine core died (HTTP 500 "EngineCore encountered an
# issue", EngineDeadError): no later request can succeed, the hook stops at once.
ENGINE_FATAL_MARKERS = ("enginecore", "engine core", "enginedeaderror", "engine is dead")


class WarmupError(Exception):
    exit_code = EXIT_FAILED

    def __init__(self, msg, exit_code=None):
        Exception.__init__(self, msg)
        if exit_code is not None:
            self.exit_code = exit_code


class MainProcess(object):
    """The server's main process, watched from its ExecStartPost hook
    (systemd passes its PID as ``$MAINPID``): is it alive (same start time,
    not a zombie) and how long ago did it start (``/proc/PID/stat``
    starttime against ``/proc/uptime``, so a wait is measured from vLLM's
    own start, not from the hook's)."""

    def __init__(self, pid, proc="/proc"):
        self.pid = int(pid)
        self.proc = proc
        fields = self._stat()
        if not fields:
            raise WarmupError("main process %d is gone" % self.pid, EXIT_MAIN_GONE)
        self.start_ticks = fields[19]

    def _stat(self):
        try:
            with open("%s/%d/stat" % (self.proc, self.pid)) as f:
                data = f.read()
        except (IOError, OSError):
            return None
        return data[data.rindex(")") + 2:].split()  # fields from 3 (state) on; comm may hold spaces

    def alive(self):
        fields = self._stat()
        return bool(fields) and fields[0] not in ("Z", "X") and fields[19] == self.start_ticks

    def age_s(self):
        with open("%s/uptime" % self.proc) as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(self.start_ticks) / float(os.sysconf("SC_CLK_TCK")))

    def check(self):
        if not self.alive():
            raise WarmupError("main process %d exited: the server is gone" % self.pid, EXIT_MAIN_GONE)


def fatal_error(rec, main=None):
    """A request record's error that no retry can cure, as a WarmupError
    (main process gone, engine core dead), else None."""
    if main is not None and not main.alive():
        return WarmupError("main process %d exited during the warmup (%s)" % (main.pid, rec.get("error")),
                           EXIT_MAIN_GONE)
    err = (rec.get("error") or "").lower()
    if err.startswith("http 503") or any(m in err for m in ENGINE_FATAL_MARKERS):
        return WarmupError("the engine reported a fatal error: %s" % rec.get("error"), EXIT_ENGINE_FATAL)
    return None


def parse_int_list(text):
    """``"16,64"`` -> ``[16, 64]``."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if part:
            out.append(int(part))
    return out


def parse_histogram(text):
    """``"16:3,64:1"`` -> ``{16: 3, 64: 1}``."""
    hist = {}
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        length, dummy, weight = part.partition(":")
        hist[int(length)] = float(weight) if weight else 1.0
    return hist


def plan_prompt_lengths(count, prompt_lens=None, histogram=None):
    """Prompt length of each of ``count`` requests.

    ``prompt_lens``: a list, cycled in order. ``histogram``: ``{length:
    weight}``; lengths are assigned in proportion to their weights (largest
    remainder), deterministic, and interleaved so any prefix of the plan has
    roughly the production mix.
    """
    if count < 1:
        raise WarmupError("count must be >= 1 (got %s)" % count)
    if histogram:
        items = sorted((int(k), float(v)) for k, v in histogram.items())
        if any(k < 1 for k, dummy in items) or any(w < 0 for dummy, w in items):
            raise WarmupError("prompt length histogram needs lengths >= 1 and weights >= 0: %r" % histogram)
        total = sum(w for dummy, w in items)
        if total <= 0:
            raise WarmupError("prompt length histogram weights sum to 0: %r" % histogram)
        exact = [(k, count * w / total) for k, w in items]
        alloc = dict((k, int(x)) for k, x in exact)
        rest = count - sum(alloc.values())
        for k, x in sorted(exact, key=lambda kx: (-(kx[1] - int(kx[1])), kx[0]))[:rest]:
            alloc[k] += 1
        # Interleave: smooth weighted round robin over the allocation.
        plan, credit = [], dict((k, 0.0) for k in alloc)
        remaining = dict(alloc)
        for dummy in range(count):
            for k in credit:
                if remaining[k] > 0:
                    credit[k] += alloc[k]
            k = max((k for k in credit if remaining[k] > 0), key=lambda kk: (credit[kk], -kk))
            credit[k] -= count
            remaining[k] -= 1
            plan.append(k)
        return plan
    lens = list(prompt_lens or [])
    if not lens:
        raise WarmupError("give prompt lengths (a list) or a prompt length histogram")
    if any(int(n) < 1 for n in lens):
        raise WarmupError("prompt lengths must be >= 1: %r" % lens)
    return [int(lens[i % len(lens)]) for i in range(count)]


def percentile(values, pct):
    """Linear-interpolated percentile (numpy's default) of a list; None if empty."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    rank = (len(vals) - 1) * pct / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (rank - lo)


def make_prompt(length, seed, prompt_format="tokens"):
    rng = random.Random(seed)
    if prompt_format == "text":
        words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
        return " ".join(rng.choice(words) for dummy in range(length))
    return [rng.randrange(TOKEN_ID_LOW, TOKEN_ID_HIGH) for dummy in range(length)]


def _session(api_key):
    s = requests.Session()
    s.trust_env = False
    if api_key:
        s.headers["Authorization"] = "Bearer %s" % api_key
    return s


def wait_ready(url, timeout, interval=2.0, session=None, main=None):
    """Poll ``GET /health`` until 200. Returns seconds waited; raises
    WarmupError at the timeout or on a 503 (dead engine). With ``main`` (a
    :class:`MainProcess`) the timeout counts from the main process's start
    and the wait ends as soon as that process is gone."""
    s = session or _session(None)
    start = time.monotonic()
    limit = timeout
    if main is not None:
        timeout = timeout - main.age_s()
        interval = min(interval, 1.0)
    last = "no answer"
    while True:
        if main is not None:
            main.check()
        try:
            r = s.get(url.rstrip("/") + "/health", timeout=min(10.0, max(1.0, timeout)))
            if r.status_code == 200:
                return round(time.monotonic() - start, 3)
            last = "HTTP %s" % r.status_code
            if r.status_code == 503:
                raise WarmupError("/health answered 503: the engine is dead", EXIT_ENGINE_FATAL)
        except requests.exceptions.RequestException as e:
            last = type(e).__name__
        if time.monotonic() - start >= timeout:
            raise WarmupError("%s/health not ready %ss after the %s (last: %s)"
                              % (url.rstrip("/"), limit, "main process started" if main else "wait began", last),
                              EXIT_TIMEOUT)
        time.sleep(interval)


def first_model(url, session, timeout=10.0):
    try:
        r = session.get(url.rstrip("/") + "/v1/models", timeout=timeout)
    except requests.exceptions.RequestException as e:
        raise WarmupError("GET /v1/models: %s" % type(e).__name__)
    if r.status_code != 200:
        raise WarmupError("GET /v1/models: HTTP %s (is the API key right?)" % r.status_code)
    data = r.json().get("data") or []
    if not data:
        raise WarmupError("GET /v1/models lists no model")
    return data[0]["id"]


def one_request(session, url, model, prompt_len, max_tokens, seed, timeout, prompt_format="tokens",
                ignore_eos=True):
    """One streamed completion. Returns a dict (never raises for request errors)."""
    body = {"model": model, "prompt": make_prompt(prompt_len, seed, prompt_format), "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: generate exactly max_tokens
    rec = {"prompt_len": prompt_len, "max_tokens": max_tokens, "ttft_s": None, "e2e_s": None,
           "completion_tokens": None, "prompt_tokens": None, "error": None}
    start = time.monotonic()
    chunks = 0
    try:
        with session.post(url.rstrip("/") + "/v1/completions", json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                text = r.text[:300]
                try:
                    text = r.json().get("error", {}).get("message") or text
                except (ValueError, AttributeError):
                    pass
                rec["error"] = "HTTP %s: %s" % (r.status_code, text)
                rec["e2e_s"] = round(time.monotonic() - start, 4)
                return rec
            # chunk_size=None: lines as they arrive (a 512-byte buffer would delay TTFT)
            for raw in r.iter_lines(chunk_size=None, decode_unicode=True):
                if not raw or not raw.startswith("data:"):
                    continue
                data = raw[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    msg = json.loads(data)
                except ValueError:
                    continue
                if msg.get("error"):
                    err = msg["error"]
                    rec["error"] = "stream error: %s" % (err.get("message") if isinstance(err, dict) else err)
                    break
                for ch in msg.get("choices") or []:
                    if ch.get("text") is not None and (ch.get("text") or ch.get("finish_reason") is None):
                        if rec["ttft_s"] is None:
                            rec["ttft_s"] = round(time.monotonic() - start, 4)
                        chunks += 1
                usage = msg.get("usage")
                if usage:
                    rec["completion_tokens"] = usage.get("completion_tokens")
                    rec["prompt_tokens"] = usage.get("prompt_tokens")
    except requests.exceptions.RequestException as e:
        rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    rec["e2e_s"] = round(time.monotonic() - start, 4)
    if rec["completion_tokens"] is None and not rec["error"]:
        rec["completion_tokens"] = chunks
    if not rec["error"] and not rec["completion_tokens"]:
        rec["error"] = "no token generated"
    return rec


def _stats(records):
    ok = [r for r in records if not r["error"]]
    ttft = [r["ttft_s"] for r in ok]
    e2e = [r["e2e_s"] for r in ok]

    def rnd(v):
        return None if v is None else round(v, 4)

    return {"count": len(records), "ok": len(ok), "errors": len(records) - len(ok),
            "ttft_p50_s": rnd(percentile(ttft, 50)), "ttft_p99_s": rnd(percentile(ttft, 99)),
            "e2e_p50_s": rnd(percentile(e2e, 50)), "e2e_p99_s": rnd(percentile(e2e, 99)),
            "ttft_max_s": rnd(max(ttft) if ttft else None), "e2e_max_s": rnd(max(e2e) if e2e else None)}


def run_warmup(url, model=None, prompt_lens=None, histogram=None, max_tokens=16, count=8, concurrency=1,
               api_key=None, timeout=120.0, wait_ready_timeout=0, prompt_format="tokens", ignore_eos=True,
               seed=0, main=None):
    """Wait (optionally) for readiness, then send ``count`` requests.

    Returns a result dict: ``model``, ``waited_s``, ``requests`` (one record
    per request, in plan order), ``cold`` (the first request), ``warm``
    (stats of the others), ``all`` (stats of all), ``errors`` (list of
    messages), ``duration_s``, ``ok``.

    ``main`` (:class:`MainProcess`): the wait counts from its start, and the
    run raises WarmupError (``exit_code`` EXIT_MAIN_GONE / EXIT_ENGINE_FATAL)
    as soon as it is gone or a request shows a dead engine core; the
    requests not sent yet are skipped.
    """
    if not HAS_REQUESTS:
        raise WarmupError("the Python library requests is missing (%s): run with the vLLM venv's python"
                          % REQUESTS_IMPORT_ERROR)
    if max_tokens < 1:
        raise WarmupError("max_tokens must be >= 1 (got %s)" % max_tokens)
    if concurrency < 1:
        raise WarmupError("concurrency must be >= 1 (got %s)" % concurrency)
    plan = plan_prompt_lengths(count, prompt_lens, histogram)
    session = _session(api_key)
    waited = None
    if wait_ready_timeout and wait_ready_timeout > 0:
        waited = wait_ready(url, wait_ready_timeout, session=session, main=main)
    if not model:
        model = first_model(url, session)
    start = time.monotonic()
    records = [None] * len(plan)
    records[0] = one_request(session, url, model, plan[0], max_tokens, seed, timeout, prompt_format, ignore_eos)
    fatal = [fatal_error(records[0], main)] if records[0]["error"] else []
    local = threading.local()

    def work(i):
        if any(fatal):
            records[i] = dict(records[0], prompt_len=plan[i], ttft_s=None, e2e_s=None, completion_tokens=None,
                              prompt_tokens=None, error="skipped: %s" % fatal[0])
            return
        if not hasattr(local, "session"):
            local.session = _session(api_key)
        records[i] = one_request(local.session, url, model, plan[i], max_tokens, seed + i, timeout,
                                 prompt_format, ignore_eos)
        if records[i]["error"]:
            fatal.append(fatal_error(records[i], main))

    if len(plan) > 1 and not any(fatal):
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(work, range(1, len(plan))))
    if any(fatal):
        raise [f for f in fatal if f][0]
    for i, r in enumerate(records):
        r["index"] = i
    errors = ["request %d (prompt_len %d): %s" % (r["index"], r["prompt_len"], r["error"])
              for r in records if r["error"]]
    return {"url": url.rstrip("/"), "model": model, "waited_s": waited, "max_tokens": max_tokens,
            "concurrency": concurrency, "prompt_lens": plan, "requests": records, "cold": dict(records[0]),
            "warm": _stats(records[1:]), "all": _stats(records), "errors": errors, "ok": not errors,
            "duration_s": round(time.monotonic() - start, 3)}


def build_parser():
    p = argparse.ArgumentParser(
        prog="vllm_warmup.py",
        description="Wait for a vLLM server's /health, then warm it with production-shaped streamed "
                    "completions and print TTFT/latency figures. Exit 0 when every request succeeded.")
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="served model name (default: first id of /v1/models)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt-lens", default=None, help="comma list of prompt lengths in tokens, cycled (16,64)")
    g.add_argument("--prompt-len-histogram", default=None,
                   help="LEN:WEIGHT comma list, e.g. 16:3,256:1 (lengths in proportion to weights)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--count", type=int, default=8, help="number of requests (first = cold)")
    p.add_argument("--concurrency", type=int, default=1, help="parallel requests after the first")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    p.add_argument("--wait-ready-timeout", type=float, default=600.0,
                   help="seconds to wait for /health 200 first (0 = do not wait); with a main PID, counted "
                        "from that process's start")
    p.add_argument("--main-pid", type=int, default=os.environ.get("MAINPID") or None,
                   help="PID of the server (default $MAINPID, which systemd sets for ExecStartPost): exit %d as "
                        "soon as it is gone" % EXIT_MAIN_GONE)
    p.add_argument("--api-key-env", default=None,
                   help="name of an environment variable holding the API key (the unit's env file sets it); "
                        "the key is never taken from argv")
    p.add_argument("--prompt-format", choices=("tokens", "text"), default="tokens")
    p.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early at EOS")
    p.add_argument("--json-out", default=None, help="write the full result as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        _err("vllm_warmup: environment variable %s is empty or unset" % args.api_key_env)
        return EXIT_USAGE
    try:
        main_proc = MainProcess(args.main_pid) if args.main_pid else None
        lens = parse_int_list(args.prompt_lens) if args.prompt_lens else None
        hist = parse_histogram(args.prompt_len_histogram) if args.prompt_len_histogram else None
        if not lens and not hist:
            lens = [16, 64]
        result = run_warmup(args.url, model=args.model, prompt_lens=lens, histogram=hist,
                            max_tokens=args.max_tokens, count=args.count, concurrency=args.concurrency,
                            api_key=api_key, timeout=args.timeout, wait_ready_timeout=args.wait_ready_timeout,
                            prompt_format=args.prompt_format, ignore_eos=not args.no_ignore_eos,
                            main=main_proc)
    except (WarmupError, ValueError) as e:
        code = getattr(e, "exit_code", EXIT_FAILED)
        _err("vllm_warmup: FAILED (exit %d): %s" % (code, e))
        if args.json_out:
            _write_json(args.json_out, {"ok": False, "errors": [str(e)], "exit_code": code})
        return code
    except requests.exceptions.RequestException as e:
        _err("vllm_warmup: FAILED: %s" % type(e).__name__)
        return EXIT_FAILED
    if args.json_out:
        _write_json(args.json_out, result)
    if not args.quiet:
        for r in result["requests"]:
            _out("vllm_warmup: req %d prompt_len=%d ttft=%ss e2e=%ss tokens=%s%s"
                 % (r["index"], r["prompt_len"], r["ttft_s"], r["e2e_s"], r["completion_tokens"],
                    (" ERROR " + r["error"]) if r["error"] else ""))
    w, c = result["warm"], result["cold"]
    _out("vllm_warmup: %s model=%s requests=%d errors=%d cold_ttft=%ss warm_ttft_p50=%ss warm_ttft_p99=%ss "
         "warm_e2e_p50=%ss warm_e2e_p99=%ss waited=%ss"
         % ("OK" if result["ok"] else "FAILED", result["model"], result["all"]["count"],
            result["all"]["errors"], c["ttft_s"], w["ttft_p50_s"], w["ttft_p99_s"], w["e2e_p50_s"],
            w["e2e_p99_s"], result["waited_s"]))
    for e in result["errors"]:
        _err("vllm_warmup: error: %s" % e)
    return EXIT_OK if result["ok"] else EXIT_FAILED


def _out(line):
    # CLI output (the ExecStartPost hook); never reached from the module.
    sys.stdout.write(line + "\n")


def _err(line):
    sys.stderr.write(line + "\n")


def _write_json(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
