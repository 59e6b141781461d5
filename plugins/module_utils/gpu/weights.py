# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Model weights estimate from config.json (parameters x bytes per weight)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "float16": 2, "fp16": 2, "bf16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}


def dtype_bytes_of(config):
    """Bytes per weight from config.json (quantization first, then dtype)."""
    q = config.get("quantization_config") or {}
    bits = q.get("bits") or q.get("w_bit") or q.get("weight_bits")
    if bits:
        return float(bits) / 8.0
    qm = str(q.get("quant_method", "")).lower()
    if qm in ("fp8", "fbgemm_fp8"):
        return 1.0
    dt = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower().replace("torch.", "")
    return float(_DTYPE_BYTES.get(dt, 2))


def estimate_params(config):
    """Parameter count of a decoder-only transformer from its config.json.

    per layer  = attention + MLP + 2 norms
      attention = h*(nh*hd) [q] + 2*h*(nkv*hd) [k, v] + (nh*hd)*h [o]
      MLP       = 3*h*I (gated: gate, up, down)           dense models
                = E*3*h*I_moe + h*E (+ shared experts)    MoE models
    total      = L*per layer + V*h [embeddings] + V*h [lm_head, unless tied] + h [final norm]
    """
    cfg = dict(config)
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = dict(cfg["text_config"])  # multimodal wrappers keep the LM config inside
    h = int(cfg["hidden_size"])
    layers = int(cfg["num_hidden_layers"])
    vocab = int(cfg["vocab_size"])
    nh = int(cfg.get("num_attention_heads") or 1)
    nkv = int(cfg.get("num_key_value_heads") or nh)
    hd = int(cfg.get("head_dim") or (h // nh))
    inter = int(cfg.get("intermediate_size") or 4 * h)
    attn = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if experts:
        moe_i = int(cfg.get("moe_intermediate_size") or inter)
        shared = int(cfg.get("n_shared_experts") or 0)
        shared_i = int(cfg.get("shared_expert_intermediate_size") or (shared * moe_i))
        mlp = int(experts) * 3 * h * moe_i + h * int(experts) + 3 * h * shared_i
    else:
        mlp = 3 * h * inter
    per_layer = attn + mlp + 2 * h
    embed = vocab * h
    head = 0 if cfg.get("tie_word_embeddings", False) else vocab * h
    return layers * per_layer + embed + head + h


def estimate_weights(config=None, params_b=None, dtype_bytes=None):
    """Weights in bytes: params x bytes per weight.

    params_b (billions) wins over config.json; dtype_bytes wins over the
    config's dtype/quantization (default 2, bf16/fp16).
    """
    source = "params_b"
    if params_b:
        params = int(float(params_b) * 1e9)
    elif config:
        params = estimate_params(config)
        source = "config.json"
    else:
        return None
    if not dtype_bytes:
        dtype_bytes = dtype_bytes_of(config) if config else 2.0
    return {"params": params, "dtype_bytes": float(dtype_bytes),
            "bytes": int(params * float(dtype_bytes)), "source": source}
