# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The API key and the environment of one instance: the only values of the
view's inputs that may hold secrets. ``instance_api_key`` is read only by
instance.env.j2 (through the filter); ``instance_env`` only by the env
template and the view's list of secret names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode


def instance_api_key(name, api_key, api_keys):
    """The key of instance ``name``: vllm_api_keys[name] if listed (``""``
    turns it off), else vllm_api_key. Read only by instance.env.j2."""
    api_keys = api_keys or {}
    if name in api_keys:
        return "" if api_keys[name] is None else str(api_keys[name])
    return "" if api_key is None else str(api_key)


def instance_env(instance, settings):
    """The environment of one instance (common env, device variables, the
    instance's own env), without VLLM_API_KEY. May hold secrets: only the
    env template and the view's name list read it."""
    env = {}
    for k, v in (settings.get("common_env") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    if settings.get("device") == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.get("cpu_kvcache_space_gib", 1))
        if _tp_size(instance, settings) > 1:
            # vLLM 0.32.0 torch.compiles (inductor) the vocab-parallel embedding's
            # mask whenever TP > 1, even with --enforce-eager; on CPU inductor
            # needs a C++ compiler (InvalidCxxCompiler at the first request,
            # measured). "" in the instance's env drops it (nodes with g++).
            env["TORCH_COMPILE_DISABLE"] = "1"
    gpus = instance.get("gpus")
    if isinstance(gpus, (list, tuple)):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    for k, v in (instance.get("env") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    multi = vllm_multinode.plan(instance, settings)
    for k, v in (multi["env"] if multi else {}).items():
        env.setdefault(k, v)  # VLLM_HOST_IP / *_SOCKET_IFNAME of this node, unless the instance sets them
    if env.get("VLLM_CPU_KVCACHE_SPACE") == "":
        # "" = let vLLM size the KV cache from gpu_memory_utilization; vLLM
        # itself fails on an empty value (int(''), measured on 0.32.0).
        del env["VLLM_CPU_KVCACHE_SPACE"]
    for key in ("TORCH_COMPILE_DISABLE", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        if env.get(key) == "":
            del env[key]  # "" in the instance's env: the variable left out
    return env


def _tp_size(instance, settings):
    key, tp = vllm_flags.lookup(vllm_flags.merged_options(instance, settings.get("common_args") or {}),
                                "tensor_parallel_size", "tp")
    try:
        return int(str(tp)) if tp is not None and not isinstance(tp, bool) else 1
    except ValueError:
        return 1
