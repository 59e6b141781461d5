"""The unit's device policy from the host's /proc/devices and device nodes (gpu/devices.py).

Captures: tests/fixtures/devices/h200 (the lent H200, driver 580.159.04: major 195 is
named ``nvidia``) and tests/fixtures/devices/nvidia-frontend (a public report of an
8-GPU node whose driver names it ``nvidia-frontend``). Hosts with more GPUs are
derived in code from these captures (one /dev/nvidiaN per GPU, minor = N), and say so.
"""
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V
from ansible_collections.llmops.serving.plugins.module_utils.gpu import devices as D

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "..", "..", "..", "fixtures")
DEV = os.path.join(FIX, "devices")
# The collection's device lines before this change (vllm@.service.j2, CUDA branch).
OLD_ALLOW = ["char-nvidia-frontend rw", "char-nvidia-caps rw", "char-nvidia-uvm rw", "/dev/nvidiactl rw",
             "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw"]


def read(*parts):
    with open(os.path.join(DEV, *parts)) as f:
        return f.read()


def host(name, gpu_count=None):
    """llmops_gpu.devices of a capture; gpu_count > 1 adds /dev/nvidia1.. (derived in code)."""
    nodes = D.parse_ls(read(name, "ls-dev-nvidia.txt"))
    gpus = [{"index": 0, "minor_number": 0}]
    for i in range(1, gpu_count or 1):
        nodes["/dev/nvidia%d" % i] = "195:%d" % i
        gpus.append({"index": i, "minor_number": i})
    return D.facts(read(name, "proc-devices.txt"), nodes, gpus)


def h200_gpu_facts():
    with open(os.path.join(FIX, "nvidia-smi", "h200-run-2026-11-30", "gpu_info-nvml.json")) as f:
        return json.load(f)


def test_the_frontend_major_is_named_by_what_the_driver_registered():
    assert host("h200")["frontend"] == "nvidia"
    assert host("nvidia-frontend")["frontend"] == "nvidia-frontend"
    assert host("h200")["majors"]["nvidia-uvm"] == 238
    assert host("nvidia-frontend")["majors"]["nvidia-uvm"] == 508


def test_the_old_unit_lines_lock_cuda_out_on_the_h200_and_the_fact_says_so():
    # What the H200 showed under systemd: char-nvidia-frontend resolves to nothing there,
    # so /dev/nvidia0 stays closed ("No CUDA GPUs are available").
    problems = D.check(OLD_ALLOW, [0], ["/dev/nvidia0"], host("h200"))
    assert len(problems) == 1
    assert problems[0].startswith("/dev/nvidia0 (GPU 0, device 195:0) is not opened by the unit's device policy")
    assert "names major 195 'nvidia' and 'nvidiactl'" in problems[0]
    # The same lines were right on the drivers that name it nvidia-frontend.
    assert D.check(OLD_ALLOW, [0], ["/dev/nvidia0"], host("nvidia-frontend")) == []


@pytest.mark.parametrize("name", ["h200", "nvidia-frontend"])
def test_the_policy_opens_every_node_cuda_needs_on_both_shapes(name):
    p = D.policy([0], host(name), isolate=True)
    assert p["problems"] == []
    assert p["allow"][:4] == ["/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw", "/dev/nvidia0 rw"]
    assert not any(a.startswith("char-nvidia-frontend") or a == "char-nvidia rw" for a in p["allow"])
    opened = D.resolve(p["allow"], host(name))
    assert {"195:0", "195:255"} <= opened


def test_caps_only_where_the_kernel_lists_them():
    assert "char-nvidia-caps rw" in D.policy([0], host("h200"))["allow"]
    assert "char-nvidia-caps rw" not in D.policy([0], host("nvidia-frontend"))["allow"]


@pytest.mark.parametrize("name,group", [("h200", "char-nvidia rw"), ("nvidia-frontend", "char-nvidia-frontend rw")])
def test_without_isolation_the_frontend_is_allowed_by_the_name_the_host_gives_it(name, group):
    p = D.policy([0], host(name, gpu_count=8), isolate=False)
    assert p["allow"][0] == group and p["problems"] == []
    assert p["cuda_visible_devices"] == "0"


def test_an_instance_on_gpu_1_gets_nvidia1_and_not_nvidia0():
    p = D.policy([1], host("h200", gpu_count=8))
    assert "/dev/nvidia1 rw" in p["allow"] and "/dev/nvidia0 rw" not in p["allow"]
    # CUDA numbers the GPUs a process can open from 0.
    assert p["cuda_visible_devices"] == "0"
    p = D.policy([5, 4], host("h200", gpu_count=8))
    assert p["gpu_nodes"] == ["/dev/nvidia5", "/dev/nvidia4"] and p["cuda_visible_devices"] == "1,0"


def test_gpu_nodes_follow_the_minor_number_not_the_index():
    d = D.facts(read("h200", "proc-devices.txt"), dict(D.parse_ls(read("h200", "ls-dev-nvidia.txt")),
                                                       **{"/dev/nvidia3": "195:3"}),
                [{"index": 0, "minor_number": 3}])
    assert D.policy([0], d)["gpu_nodes"] == ["/dev/nvidia3"]
    assert D.policy([0], d)["problems"] == []


def test_a_missing_gpu_node_is_named_with_its_gpu_and_the_fix():
    p = D.policy([2], host("h200", gpu_count=2))
    assert p["problems"] == ["/dev/nvidia2 (GPU 2) does not exist. Fix: create it as root before the unit starts: "
                             "`nvidia-modprobe -c=2`, e.g. from nvidia-persistenced or a udev rule at boot"]


def test_a_missing_uvm_node_is_named_with_the_fix():
    d = host("h200")
    del d["nodes"]["/dev/nvidia-uvm"]
    (msg,) = D.policy([0], d)["problems"]
    assert msg.startswith("/dev/nvidia-uvm (CUDA's unified memory device) does not exist. Fix:")
    assert "modprobe nvidia-uvm && nvidia-modprobe -u -c=0" in msg


def test_no_driver_loaded():
    d = D.facts("Character devices:\n  1 mem\n", {}, [])
    problems = D.policy([0], d)["problems"]
    assert problems[0].startswith("no NVIDIA driver registered major 195 in /proc/devices")
    assert any(p.startswith("/dev/nvidia0 (GPU 0) does not exist") for p in problems)


def test_read_nodes_on_this_host_reads_character_devices(tmp_path):
    # /dev/null is 1:3 on every Linux host; read_nodes globs nvidia* under the given dir.
    os.symlink("/dev/null", str(tmp_path / "nvidia0"))
    (tmp_path / "nvidia-bogus").write_text("x")
    assert D.read_nodes(str(tmp_path)) == {"/dev/nvidia0": "1:3", "/dev/nvidia-bogus": None}


def test_the_instance_view_carries_the_policy_and_the_relative_visible_devices():
    facts = h200_gpu_facts()
    devices = host("h200", gpu_count=2)
    s = {"device": "cuda", "gpu_count": 2, "gpu_devices": devices, "python": "/opt/vllm/venv/bin/python",
         "common_args": {}, "common_env": {}, "warmup": None}
    a = {"name": "g0", "model": "/m", "port": 8000, "gpus": [0]}
    b = {"name": "g1", "model": "/m", "port": 8001, "gpus": [1]}
    view = V.build_view([a, b], s)
    assert [v["gpus_used"] for v in view] == [[0], [1]]
    assert "/dev/nvidia1 rw" in view[1]["device_allow"] and "/dev/nvidia0 rw" not in view[1]["device_allow"]
    assert [v["env"]["CUDA_VISIBLE_DEVICES"] for v in view] == ["0", "0"]
    assert view[0]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert view[0]["device_problems"] == []
    # Isolation off: nvidia-smi indexes, the whole frontend by its name on this host.
    view = V.build_view([a, b], dict(s, gpu_isolation=False))
    assert [v["env"]["CUDA_VISIBLE_DEVICES"] for v in view] == ["0", "1"]
    assert view[1]["device_allow"][0] == "char-nvidia rw"
    # The real H200 gpu_info facts agree with the capture: one GPU, minor 0.
    assert [(g["index"], g["minor_number"]) for g in facts["gpus"]] == [(0, 0)]


def test_the_view_names_the_instance_in_device_problems():
    s = {"device": "cuda", "gpu_count": 2, "gpu_devices": host("h200", gpu_count=2), "common_args": {},
         "common_env": {}, "warmup": None}
    v = V.build_view([{"name": "big", "model": "/m", "args": {"tensor_parallel_size": 2}}], s)[0]
    assert v["gpus_used"] == [0, 1]
    assert v["device_problems"] == []
    v = V.build_view([{"name": "g3", "model": "/m", "gpus": [3]}], dict(s, gpu_count=None))[0]
    assert v["device_problems"][0].startswith("instance g3: /dev/nvidia3 (GPU 3) does not exist.")


def test_preflight_fails_naming_the_gpu_and_the_node_before_any_change():
    from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
    facts = h200_gpu_facts()
    facts["gpus"] = [dict(facts["gpus"][0], index=i, minor_number=i) for i in range(2)]  # 2 GPUs, derived
    facts["gpu_count"] = 2
    devices = host("h200", gpu_count=2)
    del devices["nodes"]["/dev/nvidia1"]
    facts["devices"] = devices
    s = {"device": "cuda", "gpu_count": 2, "gpu_devices": devices, "common_args": {}, "common_env": {},
         "warmup": None}
    view = V.build_view([{"name": "g0", "model": "/m", "gpus": [0]}, {"name": "g1", "model": "/m", "port": 8001,
                                                                      "gpus": [1]}], s)
    r = checks.preflight_report(facts, {"host": "h200", "instances": view, "cuda_build": "13.0",
                                        "driver_table": [{"cuda": "13.0", "min_driver": "580.65.06"}]})
    assert r["checks"]["device_nodes"]["status"] == "fail"
    assert r["checks"]["device_nodes"]["messages"] == [
        "h200: instance g1: /dev/nvidia1 (GPU 1) does not exist. Fix: create it as root before the unit starts: "
        "`nvidia-modprobe -c=1`, e.g. from nvidia-persistenced or a udev rule at boot"]
    facts["devices"] = devices = host("h200", gpu_count=2)
    view = V.build_view([{"name": "g1", "model": "/m", "gpus": [1]}], dict(s, gpu_devices=devices))
    r = checks.preflight_report(facts, {"host": "h200", "instances": view})
    assert r["checks"]["device_nodes"] == {"status": "pass", "messages": []}


def test_read_nodes_of_another_tree_names_them_as_dev_paths(tmp_path):
    import stat
    try:
        os.mknod(str(tmp_path / "nvidia3"), stat.S_IFCHR | 0o666, os.makedev(195, 3))
        (tmp_path / "nvidia-caps").mkdir()
        os.mknod(str(tmp_path / "nvidia-caps" / "nvidia-cap1"), stat.S_IFCHR | 0o400, os.makedev(241, 1))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    assert D.read_nodes(str(tmp_path)) == {"/dev/nvidia3": "195:3", "/dev/nvidia-caps/nvidia-cap1": "241:1"}
