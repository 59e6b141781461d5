# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""playbooks/swap.yml on localhost against two real local HTTP servers that answer as vLLM's
dev routes do (tests/unit/plugins/module_utils/test_vllm_sleep.py's VllmDev): the key is read
on the host from each instance's env file; check mode sends nothing; a second run changes
nothing; a name that is not a sleep-mode instance fails before any request."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, ansible_env, ansible_tool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "plugins", "module_utils"))
from test_vllm_sleep import KEY, VllmDev  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def bed(tmp_path):
    big, tiny = VllmDev(sleeping=False), VllmDev(sleeping=True)
    # The instances' venv is this test's own (its packages: the modules need requests). A bare
    # python symlink elsewhere has no pyvenv.cfg beside it: it runs as the base interpreter,
    # which lacks them (Debian trixie's python3.13, the python-matrix stage, 2026-12-04).
    if sys.prefix != sys.base_prefix:
        os.symlink(sys.prefix, str(tmp_path / "venv"))
    else:
        venv = tmp_path / "venv" / "bin"
        venv.mkdir(parents=True)
        os.symlink(sys.executable, str(venv / "python"))
    conf = tmp_path / "etc"
    conf.mkdir()
    for name in ("big", "tiny"):
        (conf / ("%s.env" % name)).write_text('VLLM_API_KEY="%s"\n' % KEY)
    inventory = {"vllm": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_device": "cuda", "vllm_venv_versioned": False, "vllm_venv": str(tmp_path / "venv"),
        "vllm_config_dir": str(conf),
        "vllm_instances": [
            {"name": "big", "model": "/m/big", "port": port(big), "gpus": [0],
             "args": {"enable_sleep_mode": True, "gpu_memory_utilization": 0.4}},
            {"name": "tiny", "model": "/m/tiny", "port": port(tiny), "served_model_name": "tiny", "gpus": [0],
             "args": {"enable_sleep_mode": True, "gpu_memory_utilization": 0.4}},
            {"name": "plain", "model": "/m/plain", "port": port(tiny) + 1, "gpus": [1]}]}}}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    yield tmp_path, big, tiny
    big.close()
    tiny.close()


def port(server):
    return int(server.url.rsplit(":", 1)[1])


def _run(tmp_path, *extra):
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
                           os.path.join(ROOT, "playbooks", "swap.yml")] + list(extra),
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    out = proc.stdout
    data = json.loads(out[out.index("{"):]) if "{" in out else {}
    tasks = dict((t["task"]["name"], t["hosts"].get("localhost", {})) for p in data.get("plays", [])
                 for t in p["tasks"])
    return proc, tasks


def _posts(server):
    return [p for m, p, q, a in server.calls if m == "POST" and not p.startswith("/v1")]


def test_swap_check_mode_then_real_then_again(bed):
    tmp_path, big, tiny = bed
    proc, tasks = _run(tmp_path, "-e", "swap_sleep=big", "-e", "swap_wake=tiny", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert tasks["Put the instance to sleep: big"]["changed"] and _posts(big) == [] and _posts(tiny) == []
    proc, tasks = _run(tmp_path, "-e", "swap_sleep=big", "-e", "swap_wake=tiny")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    woke = tasks["Wake the instance and wait until it serves: tiny"]
    assert woke["changed"] and woke["sleeping"] is False and woke["seconds_to_serving"] is not None
    assert big.sleeping and not tiny.sleeping and _posts(big) == ["/sleep"] and _posts(tiny) == ["/wake_up"]
    # the key came from the env file on the host, for the completion only, and is in no output
    assert [a for m, p, q, a in tiny.calls if p == "/v1/completions"] == ["Bearer " + KEY]
    assert KEY not in proc.stdout
    proc, tasks = _run(tmp_path, "-e", "swap_sleep=big", "-e", "swap_wake=tiny")
    assert proc.returncode == 0 and not any(t.get("changed") for t in tasks.values()), proc.stdout[-3000:]
    assert _posts(big) == ["/sleep"] and _posts(tiny) == ["/wake_up"]


@pytest.mark.parametrize("names,words", [
    (("big", "plain"), "instance plain on localhost has no sleep mode"),
    (("big", "nope"), "localhost has instance big but no instance nope"),
    (("big", "big"), "must name two different instances"),
])
def test_a_name_that_is_not_a_sleep_mode_instance_fails_before_any_change(bed, names, words):
    tmp_path, big, tiny = bed
    proc, tasks = _run(tmp_path, "-e", "swap_sleep=%s" % names[0], "-e", "swap_wake=%s" % names[1])
    assert proc.returncode != 0 and words in proc.stdout, proc.stdout[-3000:]
    assert big.calls == [] and tiny.calls == []


def test_a_cuda_host_with_vllm_device_auto_reads_its_gpus_before_the_view(bed):
    """swap.yml reads no GPU facts of its own: with vllm_device auto the view reads them (gpu_info
    through the real module, nvidia-smi replaying the H200 capture), not "cpu" (which refused
    both sleep-mode instances on the H200, 2026-12-04)."""
    tmp_path, big, tiny = bed
    inv = yaml.safe_load((tmp_path / "inv.yml").read_text())
    host = inv["vllm"]["hosts"]["localhost"]
    host["vllm_device"] = "auto"
    # The capture has one GPU: the instance on GPU 1 would be refused (rightly) for that.
    host["vllm_instances"] = [i for i in host["vllm_instances"] if i["name"] != "plain"]
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inv))
    fix = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(os.path.join(fix, "fake-nvidia-smi"), str(bindir / "nvidia-smi"))
    os.environ.update(PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_GPU_FIXTURE=os.path.join(fix, "h200"),
                      FAKE_GPU_NVCC="", FAKE_GPU_CASE_FILE="/nonexistent")
    try:
        proc, tasks = _run(tmp_path, "-e", "swap_sleep=big", "-e", "swap_wake=tiny", "--check")
    finally:
        os.environ["PATH"] = os.environ["PATH"].split(":", 1)[1]
        for k in ("FAKE_GPU_FIXTURE", "FAKE_GPU_NVCC", "FAKE_GPU_CASE_FILE"):
            os.environ.pop(k, None)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "vllm_device is cpu" not in proc.stdout
    assert tasks["Put the instance to sleep: big"]["changed"] and _posts(big) == [] and _posts(tiny) == []
