# -*- coding: utf-8 -*-
"""Run the real gpu_info module (through ansible) against the fake nvidia-smi replaying captures."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi")
ANSIBLE = shutil.which("ansible") or os.path.join(os.path.dirname(sys.executable), "ansible")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed")


def run_module(tmp_path, fixture=None, nvcc=None, args="disk_paths=/nonexistent/dir/x backend=nvidia-smi"):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if fixture:
        os.symlink(os.path.join(FIX, "fake-nvidia-smi"), str(bindir / "nvidia-smi"))
    if nvcc:
        os.symlink(os.path.join(FIX, "fake-nvidia-smi"), str(bindir / "nvcc"))
    env = dict(os.environ)
    env.update({
        "PATH": "%s:%s:/usr/bin:/bin" % (bindir, os.path.dirname(ANSIBLE)),
        "FAKE_GPU_FIXTURE": os.path.join(FIX, fixture) if fixture else "",
        "FAKE_GPU_NVCC": os.path.join(FIX, *nvcc) if nvcc else "",
        "FAKE_GPU_CASE_FILE": "/nonexistent",
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    })
    out = subprocess.run([ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-m", "llmops.serving.gpu_info",
                          "-a", args, "--check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert res["changed"] is False
    return res["ansible_facts"]["llmops_gpu"]


def test_h200_capture(tmp_path):
    f = run_module(tmp_path, "h200", ("h200", "nvcc-version.txt"))
    assert f["mode"] == "cuda" and f["source"] == "nvidia-smi"
    assert f["gpu_count"] == 1 and f["gpus"][0]["name"] == "NVIDIA H200"
    assert f["driver_version"] == "580.159.04" and f["cuda_driver_version"] == "13.0"
    assert f["nvcc_version"] == "13.0" and f["cuda_archs"] == ["90"]
    assert f["disk"][0]["checked_path"] == "/" and f["disk"][0]["free_bytes"] > 0


def test_mixed_capture(tmp_path):
    f = run_module(tmp_path, "mixed")
    assert f["gpu_count"] == 2 and f["cuda_archs"] == ["80", "90"]
    assert f["gpus"][1]["pci_bus_id"] == "00000000:3B:00.0"


def test_driver_not_loaded_is_cpu_mode(tmp_path):
    f = run_module(tmp_path, "no-driver")
    assert f["mode"] == "cpu" and f["gpu_count"] == 0
    assert "rc=9" in f["error"] and "couldn't communicate with the NVIDIA driver" in f["error"]
    assert f["nvidia_smi_path"].endswith("/nvidia-smi")


def test_no_nvidia_smi_is_cpu_mode(tmp_path):
    f = run_module(tmp_path, None, args="backend=auto")
    assert f["mode"] == "cpu" and f["nvidia_smi_path"] is None and "nvidia-smi not found" in f["error"]
