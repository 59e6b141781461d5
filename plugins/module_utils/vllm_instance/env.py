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
from ansible_collections.llmops.serving.plugins.module_utils import vllm_sleep
from ansible_collections.llmops.serving.plugins.module_utils.gpu import devices as gpu_devices


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
    if settings.get("device") == "cuda":
        # CUDA numbers GPUs fastest first, NVML and nvidia-smi by PCI bus:
        # one order for both, so `gpus` (nvidia-smi indexes) means the same GPUs.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if isinstance(gpus, (list, tuple)) and gpus:
            env["CUDA_VISIBLE_DEVICES"] = instance_devices(instance, settings)["cuda_visible_devices"]
    elif isinstance(gpus, (list, tuple)):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    for k, v in (instance.get("env") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    if vllm_sleep.sleep_mode(instance, settings.get("common_args")):
        # vLLM serves /sleep, /wake_up and /is_sleeping only in dev mode (vllm_sleep.py)
        env[vllm_sleep.DEV_MODE_ENV] = "1"
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


def gpus_per_node(instance, settings):
    """The GPUs one node of the instance runs on (the rule: vllm_flags.gpus_per_node)."""
    opts = vllm_flags.merged_options(instance, settings.get("common_args") or {})
    sizes = [max(vllm_flags.int_or_none(vllm_flags.lookup(opts, *names)[1]) or 1, 1)
             for names in (("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"),
                           ("data_parallel_size", "dp"))]
    nodes = instance.get("nodes")
    return vllm_flags.gpus_per_node(sizes[0], sizes[1], sizes[2], nodes if nodes not in (None, "", []) else None) or 1


def instance_devices(instance, settings):
    """The device policy of one CUDA instance on this host (gpu/devices.py
    ``policy``): the GPUs it runs on (``gpus``), the ``DeviceAllow=`` values,
    the ``CUDA_VISIBLE_DEVICES`` value as its processes number the GPUs, and
    the problems of the host's device nodes (each names the node and the fix).
    ``settings``: ``gpu_devices`` (llmops_gpu.devices, or None), ``gpu_isolation``."""
    devices = settings.get("gpu_devices")
    host = sorted(int(i) for i in ((devices or {}).get("gpu_nodes") or {}))
    if not host and settings.get("gpu_count"):
        host = list(range(int(settings["gpu_count"])))
    listed = instance.get("gpus") if isinstance(instance.get("gpus"), (list, tuple)) else None
    used = gpu_devices.instance_gpus(listed, gpus_per_node(instance, settings), host)
    out = gpu_devices.policy(used, devices, settings.get("gpu_isolation", True) is not False)
    out["gpus"] = used
    return out


def _tp_size(instance, settings):
    key, tp = vllm_flags.lookup(vllm_flags.merged_options(instance, settings.get("common_args") or {}),
                                "tensor_parallel_size", "tp")
    try:
        return int(str(tp)) if tp is not None and not isinstance(tp, bool) else 1
    except ValueError:
        return 1
