# -*- coding: utf-8 -*-
"""Per-GPU memory of the host's instances (summed where they share), the checks table, the arch map."""
import os

import pytest

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa
from ansible_collections.llmops.serving.plugins.module_utils import kv_capacity as kv
from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import memory
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights

LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def h200_facts(n=1):
    d = os.path.join(FIXTURES, "nvidia-smi", "h200")
    with open(os.path.join(d, "query-gpu.csv")) as f:
        row = f.read().strip()
    # n copies of the real H200 row (indices 0..n-1, bus ids kept distinct)
    rows = [row.replace("0, NVIDIA", "%d, NVIDIA" % i, 1).replace("00000000:00:06.0", "00000000:00:%02X.0" % (6 + i))
            for i in range(n)]
    return gpu_facts.facts_from_smi("\n".join(rows), None)


def views(instances, common=None, default=None):
    out = memory.instance_fields(instances, common, default)
    for v in out:
        v["weights"] = weights.estimate_weights(LLAMA3_8B)
    return out


def settings(instances, **kw):
    s = {"host": "gpu01", "cuda_build": "13.0", "driver_table": [{"cuda": "13.0", "min_driver": "580.65.06",
                                                                  "recommended_driver": "580.65.06"}],
         "reserve_gib": 2, "own_process_patterns": ["^VLLM::"], "instances": instances}
    s.update(kw)
    return s


# --------------------------------------------------------------- adapter (view fields)
def test_instance_fields_merge_common_args_and_default_utilization():
    inv = [{"name": "a", "model": "/m", "gpus": [0, 1], "args": {"tensor_parallel_size": 2, "max_model_len": 32768},
            "env": {"HF_TOKEN": "hf_secret"}},
           {"name": "b", "model": "/m", "args": {"gpu_memory_utilization": 0.3}}]
    a, b = memory.instance_fields(inv, {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8"})
    assert (a["tensor_parallel_size"], a["pipeline_parallel_size"], a["gpus"], a["max_model_len"]) == (2, 1, [0, 1], 32768)
    assert a["gpu_memory_utilization"] == 0.90 and b["gpu_memory_utilization"] == 0.3 and b["gpus"] is None
    assert a["args"] == {"kv_cache_dtype": "fp8"} and "hf_secret" not in repr(a)  # no env, no secrets
    # no utilization anywhere: vllm_default_gpu_memory_utilization, else vLLM's own default
    assert memory.instance_fields([{"name": "c"}], {}, 0.85)[0]["gpu_memory_utilization"] == 0.85
    assert memory.instance_fields([{"name": "c"}])[0]["gpu_memory_utilization"] == 0.92
    with pytest.raises(memory.InstancePlanError, match=r"vllm_instances\[d\].gpus"):
        memory.instance_fields([{"name": "d", "gpus": ["x"]}])


def test_option_reads_the_view_args_never_the_argv():
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance
    view = vllm_instance.build_view([{"name": "a", "model": "/m", "args": {"kv-cache-dtype": "fp8", "block_size": 32}}],
                                    {"device": "cpu", "common_args": {"max_num_seqs": 4}})[0]
    assert memory.option(view, "kv_cache_dtype") == "fp8" and memory.option(view, "block_size") == 32
    assert memory.option(view, "max_num_seqs") == 4 and memory.option(view, "max_num_batched_tokens") is None
    # The rendered argv is not read back.
    assert memory.option({"name": "a", "argv": ["--model", "/m", "--kv-cache-dtype", "fp8"]}, "kv_cache_dtype") is None


# --------------------------------------------------------------- per GPU, summed
def test_instances_without_gpus_share_gpu0_and_their_utilization_sums():
    f = h200_facts(2)
    vs = views([{"name": "a"}, {"name": "b"}], {"gpu_memory_utilization": 0.6})
    by_instance, by_gpu, errors = memory.placement(vs, f["gpus"])
    assert errors == [] and by_instance == {"a": [0], "b": [0]} and [v["name"] for v in by_gpu[1]] == []
    r = checks.preflight_report(f, settings(vs))
    assert r["failed"] == ["memory_free", "memory_total"]
    msg = r["checks"]["memory_total"]["messages"][0]
    assert "GPU 0 (NVIDIA H200" in msg and "shared by instances a (0.60), b (0.60)" in msg and "1.20 > 1" in msg
    assert "gpu_memory_utilization 1.20 of instance(s) a, b" in r["checks"]["memory_free"]["messages"][0]
    # given their own GPUs, both fit
    vs = views([{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}], {"gpu_memory_utilization": 0.6})
    assert checks.preflight_report(f, settings(vs))["failed"] == []


def test_tensor_parallel_instances_sum_on_every_gpu_they_span():
    f = h200_facts(4)
    vs = views([{"name": "tp4", "gpus": [0, 1, 2, 3], "args": {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.5}},
                {"name": "one", "gpus": [3], "args": {"gpu_memory_utilization": 0.55}}])
    shares = memory.shares(memory.placement(vs, f["gpus"])[1], f["gpus"])
    assert [s["utilization"] for s in shares] == [0.5, 0.5, 0.5, 1.05]
    r = checks.preflight_report(f, settings(vs))
    assert r["failed"] == ["memory_free", "memory_total"]
    assert "GPU 3 (" in r["checks"]["memory_total"]["messages"][0]
    assert len(r["checks"]["memory_total"]["messages"]) == 1


def test_placement_errors_name_the_instance_and_variable():
    f = h200_facts(1)
    r = checks.preflight_report(f, settings(views([{"name": "tp2", "args": {"tensor_parallel_size": 2}},
                                                   {"name": "far", "gpus": [5]}])))
    msgs = r["checks"]["memory_total"]["messages"]
    assert "instance tp2: tensor_parallel_size 2 x pipeline_parallel_size 1 = 2 GPUs" in msgs[0]
    assert "the host has 1 GPU(s)" in msgs[0]
    assert "instance far: vllm_instances[far].gpus lists GPU(s) [5], but this host has GPU(s) [0]" in msgs[1]


def spanning_views(host, mode="native"):
    """The vllm_view of TP 8 x PP 2 over nodes a, b on ``host`` (issue 29), with the weights estimate."""
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance
    vs = vllm_instance.build_view(
        [{"name": "big", "model": "/srv/models/big", "nodes": ["a", "b"], "distributed_mode": mode,
          "args": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}}],
        {"device": "cuda", "gpu_count": None, "inventory_hostname": host,
         "node_addresses": {"a": "10.0.0.1", "b": "10.0.0.2"}})
    for v in vs:
        v["weights"] = weights.estimate_weights(LLAMA3_8B)
    return vs


@pytest.mark.parametrize("mode,host", [("native", "a"), ("native", "b"), ("ray", "a")])
def test_spanning_instance_takes_tp_pp_over_nodes_gpus_of_each_8_gpu_node(mode, host):
    f = h200_facts(8)
    vs = spanning_views(host, mode)
    assert memory.placement(vs, f["gpus"])[0::2] == ({"big": [0, 1, 2, 3, 4, 5, 6, 7]}, [])
    r = checks.preflight_report(f, settings(vs))
    assert r["failed"] == [] and r["placement"] == {"big": list(range(8))}


def test_spanning_instance_on_4_gpu_nodes_fails_naming_need_have_and_fix():
    f = h200_facts(4)
    r = checks.preflight_report(f, settings(spanning_views("b")))
    assert r["failed"] == ["memory_total"]
    msg = r["checks"]["memory_total"]["messages"][0]
    for needle in ("gpu01: instance big: tensor_parallel_size 8 x pipeline_parallel_size 2 = 16 ranks over 2 nodes "
                   "(a, b) = 8 GPUs on each node, but the host has 4 GPU(s)",
                   "Fix: more GPUs per node, more nodes in vllm_instances[big].nodes, or lower tensor_parallel_size"):
        assert needle in msg, (needle, msg)
    # the interim adapter (hosts that only alias vllm_instances) says the same
    vs = memory.instance_fields([{"name": "big", "nodes": ["a", "b"],
                                  "args": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}}])
    assert vs[0]["gpus_per_node"] == 8
    assert "= 8 GPUs on each node, but the host has 4 GPU(s)" in memory.placement(vs, f["gpus"])[2][0]


def test_weights_share_uses_tp_times_pp():
    f = h200_facts(2)
    big = dict(LLAMA3_8B, num_hidden_layers=320)  # ~80B parameters, 150 GiB bf16
    vs = memory.instance_fields([{"name": "big", "gpus": [0, 1], "args": {"pipeline_parallel_size": 2}}])
    vs[0]["weights"] = weights.estimate_weights(big)
    assert checks.preflight_report(f, settings(vs))["checks"]["memory_total"]["status"] == "pass"
    vs = memory.instance_fields([{"name": "big", "gpus": [0, 1]}])
    vs[0]["weights"] = weights.estimate_weights(big)
    msg = checks.preflight_report(f, settings(vs))["checks"]["memory_total"]["messages"][0]
    assert "instance big" in msg and "tensor_parallel_size 1 x pipeline_parallel_size 1" in msg
    assert "vllm_instances[big].args.tensor_parallel_size" in msg


def test_kv_check_fails_on_a_refusal_and_names_the_variables():
    f = h200_facts(1)
    vs = views([{"name": "long", "gpus": [0], "args": {"max_model_len": 1048576, "gpu_memory_utilization": 0.2}}])
    vs[0]["kv"] = kv.predict(LLAMA3_8B, "cuda", 0.2, 143771, vs[0]["weights"]["bytes"], max_model_len=1048576)
    r = checks.preflight_report(f, settings(vs))
    assert r["failed"] == ["kv_cache"]
    assert "vllm_instances[long].args.max_model_len" in r["failures"][0]
    vs[0].pop("kv")
    vs[0]["kv_skipped"] = "long: no config.json at /m"
    assert checks.preflight_report(f, settings(vs))["checks"]["kv_cache"] == {
        "status": "skip", "messages": ["gpu01: KV capacity not predicted (long: no config.json at /m)."]}


# --------------------------------------------------------------- the table, the arch map
def test_every_check_is_one_function_in_the_table():
    names = [n for n, _fn in checks.CHECKS]
    assert names == ["driver_present", "driver_version", "compute_capability", "memory_total", "memory_free",
                     "kv_cache", "ecc", "persistence", "mig", "fabric", "device_nodes", "nvcc", "disk"]
    assert all(fn.__name__ == "check_" + n for n, fn in checks.CHECKS)
    r = checks.preflight_report(h200_facts(1), settings([]))
    assert sorted(r["checks"]) == sorted(names)


def test_one_arch_map_shared_with_the_flash_attn_role():
    for cc in ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "11.0", "12.0"):
        assert gpu_facts.flash_attn_arch(cc) == fa.arch_for_compute_capability(cc)[0]
    assert gpu_facts.flash_attn_arch(None) is None and gpu_facts.flash_attn_arch("n/a") is None


def test_facts_keep_no_copy_of_the_map():
    import inspect
    src = inspect.getsource(gpu_facts)
    assert '"80"' not in src and '"120"' not in src


def test_the_h200_profile_as_vllm_service_deploys_it():
    """inventories/h200: 2 x Qwen2.5-72B, TP 4, util 0.90, fp8 KV, on 8 H200 (the real capture's row x 8)."""
    import yaml
    with open(os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), "inventories", "h200", "group_vars",
                           "vllm", "main.yml")) as f:
        inv = yaml.safe_load(f)
    qwen72b = {"hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80, "num_attention_heads": 64,
               "num_key_value_heads": 8, "vocab_size": 152064, "torch_dtype": "bfloat16",
               "max_position_embeddings": 32768, "sliding_window": 131072, "use_sliding_window": False}
    f = h200_facts(8)
    vs = memory.instance_fields(inv["vllm_instances"], inv["vllm_common_args"])
    assert [(v["tensor_parallel_size"], v["gpu_memory_utilization"], v["args"]["kv_cache_dtype"]) for v in vs] == \
        [(4, 0.90, "fp8")] * 2
    w = weights.estimate_weights(qwen72b)
    for v in vs:
        v["weights"] = w
        v["kv"] = kv.predict(qwen72b, "cuda", v["gpu_memory_utilization"], 143771, w["bytes"],
                             tensor_parallel_size=4, kv_cache_dtype="fp8", max_model_len=v["max_model_len"])
    r = checks.preflight_report(f, settings(vs))
    assert r["failed"] == [] and r["placement"] == {"qwen72b-a": [0, 1, 2, 3], "qwen72b-b": [4, 5, 6, 7]}
    # the same instances without gpus would both land on GPUs 0-3: 1.80 there
    for v in vs:
        v["gpus"] = None
    r = checks.preflight_report(f, settings(vs))
    assert "adds up to 1.80 > 1" in r["checks"]["memory_total"]["messages"][0]
