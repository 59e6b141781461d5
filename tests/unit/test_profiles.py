"""Each GPU profile (inventories/a100, h100, h200) passes the flag validation.

Loads the inventory with `ansible-inventory --list` and runs the fictional
flag and range checks on every instance list in it (the deployed
`vllm_instances` and the examples). With VLLM_TEST_PYTHON set, the installed
vLLM's own parser checks them too (one child process for all profiles).
"""
import json
import os
import subprocess

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags as F

from conftest import ROOT, ansible_tool

PROFILES = {"a100": 8, "h100": 8, "h200": 8}
LISTS = ("vllm_instances", "vllm_instances_8x_tp1", "vllm_profile_examples")


def load(profile):
    exe = ansible_tool("ansible-inventory")
    out = subprocess.run([exe, "-i", os.path.join(ROOT, "inventories", profile), "--list"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    data = json.loads(out)
    hosts = data["vllm"]["hosts"]
    assert hosts and set(hosts) <= set(data["gpu"]["hosts"] if "gpu" in data and "hosts" in data["gpu"]
                                       else _children_hosts(data, "gpu"))
    return data["_meta"]["hostvars"][hosts[0]]


def _children_hosts(data, group):
    hosts = set(data.get(group, {}).get("hosts", []))
    for child in data.get(group, {}).get("children", []):
        hosts |= _children_hosts(data, child)
    return hosts


def instance_lists(hv):
    return [(name, hv[name]) for name in LISTS if name in hv]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_passes_fictional_and_range_checks(profile):
    hv = load(profile)
    assert hv["vllm_device"] == "cuda"
    lists = instance_lists(hv)
    assert lists and lists[0][0] == "vllm_instances"
    for name, instances in lists:
        probs = F.check_fictional(instances, hv.get("vllm_common_args"), hv.get("vllm_common_env"))
        probs += F.check_ranges(instances, hv.get("vllm_common_args"), PROFILES[profile], "cuda")
        assert probs == [], (profile, name, F.format_problems(probs))
        for inst in instances:
            assert str(inst["model"]).startswith("/srv/models/"), inst


def test_profiles_cover_the_issue():
    a100 = load("a100")
    models = {i["model"]: i for i in a100["vllm_instances"]}
    assert models["/srv/models/Qwen2.5-7B-Instruct"]["args"]["max_model_len"] == 8192
    assert a100["vllm_common_args"]["gpu_memory_utilization"] == 0.9
    assert models["/srv/models/Qwen2.5-7B-Instruct-AWQ"]["args"]["quantization"] == "awq"
    big = models["/srv/models/Qwen2.5-72B-Instruct"]
    assert big["args"]["tensor_parallel_size"] == 4 and len(big["gpus"]) == 4
    for profile in ("h100", "h200"):
        hv = load(profile)
        assert hv["vllm_common_args"]["kv_cache_dtype"] == "fp8"
        assert hv["vllm_common_args"]["attention_backend"] == "FLASH_ATTN"
        assert [i["args"]["tensor_parallel_size"] for i in hv["vllm_instances"]] == [4, 4]
        assert len(hv["vllm_instances_8x_tp1"]) == 8
        assert {tuple(i["gpus"]) for i in hv["vllm_instances_8x_tp1"]} == {(g,) for g in range(8)}
        assert any("speculative_config" in i["args"] for i in hv["vllm_profile_examples"])


@pytest.mark.skipif(not os.environ.get("VLLM_TEST_PYTHON"), reason="VLLM_TEST_PYTHON is not set")
def test_profiles_pass_the_installed_vllm_parser():
    argvs, maps = [], []
    for profile in sorted(PROFILES):
        hv = load(profile)
        for name, instances in instance_lists(hv):
            for i, inst in enumerate(instances):
                argvs.append(F.parser_argv(inst, hv.get("vllm_common_args")))
                maps.append(("%s:%s" % (profile, name), i, F.flag_map(i, inst, hv.get("vllm_common_args"))))
    cp = subprocess.run([os.environ["VLLM_TEST_PYTHON"], "-c", F.PARSER_CHILD],
                        input=json.dumps({"argvs": argvs}), capture_output=True, text=True,
                        env=F.parser_child_env(os.environ), timeout=300, check=False)
    out = F.parse_child_output(cp.stdout)
    assert out and "import_error" not in out, cp.stderr[-2000:]
    bad = []
    for (where, i, fmap), res in zip(maps, out["results"]):
        bad += ["%s %s" % (where, p["msg"]) for p in F.parser_problems([res], [fmap], [i])]
    assert bad == [], "\n".join(bad)
    assert len(out["results"]) == len(argvs) > 20


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_instance_view_builds(profile):
    """The instance view (every per-instance rule of vllm_service) accepts each deployable list."""
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V
    hv = load(profile)
    settings = {"device": "cuda", "gpu_count": PROFILES[profile], "common_args": hv.get("vllm_common_args") or {},
                "common_env": hv.get("vllm_common_env") or {"HF_HUB_OFFLINE": "1"}}
    for name in ("vllm_instances", "vllm_instances_8x_tp1"):
        if name in hv:
            view = V.build_view(hv[name], settings)
            assert all(v["url"].startswith("http://127.0.0.1:") for v in view), (profile, name)
