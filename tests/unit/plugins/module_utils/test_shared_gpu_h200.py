# -*- coding: utf-8 -*-
"""Several models on one GPU, sized before any change (issue 33 item 3), against the real H200 run of
2026-12-04 (tests/fixtures/h200-swap-2026-12-04: vLLM 0.25.1 under systemd, the role's units): two
instances on GPU 0 with gpu_memory_utilization 0.4 each, max_model_len 2048 - `tiny` (vllm_tiny_model's
default shape with head_dim 64, as scripts/h200/inventory generates it) and `swapb` (the llama3-8b preset, 16,065,120,862 bytes of bf16 weights). The preflight
predicted swapb's KV cache before the run changed anything; the fleet report measured both with both
engines awake on the same GPU (117,339 MiB used).

What the preflight decides for a shared GPU (kv_capacity.predict per instance, on its own share; the sum of
the shares; weights and one max_model_len sequence per share) is checked here on the same facts.
"""
import os
import re

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import kv_capacity as kv
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model
from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights

RUN = os.path.join(FIXTURES, "h200-swap-2026-12-04")
SMI = os.path.join(FIXTURES, "nvidia-smi", "h200")
SHARE, MAX_LEN = 0.4, 2048


def read(*p):
    with open(os.path.join(*p)) as f:
        return f.read()


def total_mib():
    return gpu_facts.facts_from_smi(read(SMI, "query-gpu.csv"), read(SMI, "nvidia-smi-q.xml"))["gpus"][0]["memory_total_mib"]


def config(preset=None, **shape):
    d = vllm_tiny_model.wanted_shape(dict(shape, preset=preset) if preset else shape)
    d.update(vllm_tiny_model.PRESET_EXTRAS.get(preset, {}))
    d.update(torch_dtype="bfloat16", tie_word_embeddings=False)
    return d


def swapb_weights():
    """The safetensors bytes on the host (the shard listing in site_run.txt: what the preflight sums)."""
    shards = dict((name, int(size)) for size, name in re.findall(
        r"root root +(\d+) Dec  4 06:2\d (model-\d+-of-\d+\.safetensors)", read(RUN, "site_run.txt")))
    assert len(shards) == 4
    return sum(shards.values())


def captured():
    """(the preflight's printed prediction for swapb, the fleet report's measured and predicted KV tokens)."""
    log = read(RUN, "swap-site.log")
    pred = re.search(r"swapb: (\d+) KV tokens \((\d+) blocks of 16, (\d+) bytes/token per GPU\)", log)
    rows = dict((m.group(1), (int(m.group(2)), int(m.group(3)))) for m in re.finditer(
        r"- h200\s+(\w+)\s+ready\s+0\.25\.1\s+\w+\s+(\d+)\s+(\d+)", log))
    return tuple(int(g) for g in pred.groups()), rows


def predict(cfg, weights_bytes, share=SHARE):
    return kv.predict(cfg, device="cuda", gpu_memory_utilization=share, gpu_total_mib=total_mib(),
                      weights_bytes=weights_bytes, max_model_len=MAX_LEN)


def test_the_capture_has_both_instances_measured_on_one_gpu():
    (tokens, blocks, bpt), rows = captured()
    assert sorted(rows) == ["swapb", "tiny"]
    assert (tokens, blocks, bpt) == (318624, 19914, 131072)


def test_each_instance_is_predicted_on_its_own_share_within_3_percent_of_what_vllm_measured_beside_the_other():
    (tokens, dummy, bpt), rows = captured()
    big = predict(config("llama3-8b"), swapb_weights())
    # The same arithmetic the preflight ran before the change.
    assert (big["tokens"], big["bytes_per_token"], big["refusal"]) == (tokens, bpt, None)
    measured_b, reported_pred_b = rows["swapb"]
    assert reported_pred_b == tokens
    assert abs(big["tokens"] / float(measured_b) - 1) < 0.03, (big["tokens"], measured_b)  # -1.9 %
    # scripts/h200/inventory: vllm_tiny_model_head_dim 64 -> the role generates 128 / 64 = 2 heads.
    tiny_cfg = config(num_attention_heads=2)
    tiny = predict(tiny_cfg, weights.estimate_weights(tiny_cfg)["bytes"])
    measured_t, dummy = rows["tiny"]
    assert abs(tiny["tokens"] / float(measured_t) - 1) < 0.03, (tiny["tokens"], measured_t)  # -0.2 %
    # Two shares of 0.4: the sum fits the GPU; each engine's KV is its own share's, not the GPU's.
    whole = predict(config("llama3-8b"), swapb_weights(), share=0.8)
    assert whole["tokens"] > 2 * big["tokens"]


def test_a_share_too_small_for_the_8b_model_is_refused_before_any_change_naming_the_instance_and_the_fix():
    cfg = config("llama3-8b")
    # 0.1 of 143,771 MiB is 14 GiB: less than the 15 GiB of weights.
    assert predict(cfg, swapb_weights(), share=0.1)["refusal"] == "weights_exceed_share"
    # 0.12: the weights fit, the activations and the fixed overhead leave no KV memory.
    low = predict(cfg, swapb_weights(), share=0.12)
    assert low["refusal"] == "no_kv_memory", low
    # 0.125: 2,336 tokens, one 2048-token sequence fits.
    assert predict(cfg, swapb_weights(), share=0.125)["refusal"] is None
    msg = kv.refusal_message("h200", "swapb", low, "vllm_instances[swapb].args")
    assert "swapb" in msg and "gpu_memory_utilization" in msg, msg
    # The run's 0.4 is accepted.
    assert kv.refusal_message("h200", "swapb", predict(cfg, swapb_weights()), "vllm_instances[swapb].args") is None


def preflight(shares):
    """The gpu_preflight checks on the H200 capture with both instances on GPU 0 at SHARES (tiny, swapb)."""
    tiny_cfg, big_cfg = config(num_attention_heads=2), config("llama3-8b")
    big_w = {"bytes": swapb_weights(), "source": "safetensors"}
    models = {"tiny": (tiny_cfg, weights.estimate_weights(tiny_cfg)), "swapb": (big_cfg, big_w)}
    instances = []
    for name, share in zip(("tiny", "swapb"), shares):
        cfg, w = models[name]
        instances.append({"name": name, "model": "/srv/models/" + name, "gpus": [0], "tensor_parallel_size": 1,
                          "pipeline_parallel_size": 1, "gpu_memory_utilization": share, "max_model_len": MAX_LEN,
                          "args": {}, "weights": w, "kv": predict(cfg, w["bytes"], share=share)})
    facts = gpu_facts.facts_from_smi(read(SMI, "query-gpu.csv"), read(SMI, "nvidia-smi-q.xml"), None,
                                     "/usr/bin/nvidia-smi")
    return checks.preflight_report(facts, {
        "host": "h200", "cuda_build": "13.0", "driver_table": [{"cuda": "13.0", "min_driver": "580.65.06"}],
        "reserve_gib": 0, "own_process_patterns": [], "disk": [], "instances": instances})


def test_the_preflight_passes_the_runs_two_shares_and_names_the_instance_and_the_fix_otherwise():
    ok = preflight((SHARE, SHARE))
    assert ok["checks"]["memory_total"]["status"] == "pass" and ok["checks"]["kv_cache"]["status"] == "pass", ok
    assert ok["placement"] == {"tiny": [0], "swapb": [0]} or sorted(ok["placement"]) == ["swapb", "tiny"]
    over = preflight((SHARE, 0.7))
    assert "memory_total" in over["failed"], over
    assert any("tiny (0.40), swapb (0.70)" in m and "adds up to 1.10" in m for m in over["failures"]), over["failures"]
    small = preflight((SHARE, 0.12))
    assert "kv_cache" in small["failed"], small
    assert any("swapb" in m and "gpu_memory_utilization" in m for m in small["failures"]), small["failures"]
    assert not any(m.startswith("h200: tiny") for m in small["failures"]), small["failures"]
