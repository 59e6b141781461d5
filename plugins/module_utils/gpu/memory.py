# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""What the vLLM instances of a host need from each GPU (summed where they share).

Input: the instance view (``vllm_instance.build_view`` fields ``name``, ``model``,
``gpus``, ``tensor_parallel_size``, ``pipeline_parallel_size``, ``gpus_per_node``,
``gpu_memory_utilization``, ``max_model_len``, ``argv``). Until that view lands,
:func:`instance_fields` builds those fields from ``vllm_instances`` +
``vllm_common_args`` (swap it for ``build_view`` in ``plugins/filter/gpu.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags

# vLLM's own default for --gpu-memory-utilization, used only when the caller
# passes no vllm_default_gpu_memory_utilization (the vllm_service role's named default).
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92

# Options the memory and KV checks read besides the view's own fields.
KV_OPTIONS = ("kv_cache_dtype", "block_size", "max_num_seqs", "max_num_batched_tokens",
              "kv_cache_memory_bytes", "quantization")


class InstancePlanError(ValueError):
    """Bad instance input; the message names the instance, the variable and the fix."""


def _int(value, name, var):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InstancePlanError("instance %s: %s must be an integer (got %r)" % (name, var, value))


def instance_fields(instances, common_args=None, default_gpu_memory_utilization=None):
    """Interim stand-in for ``vllm_instance.build_view``: the fields the checks read.

    No secrets: only the listed fields and :data:`KV_OPTIONS` leave this function.
    """
    default = (VLLM_DEFAULT_GPU_MEMORY_UTILIZATION if default_gpu_memory_utilization in (None, "")
               else float(default_gpu_memory_utilization))
    out = []
    for inst in instances or []:
        name = inst.get("name")
        args = dict(common_args or {})
        args.update(inst.get("args") or {})
        args = dict((str(k).replace("-", "_"), v) for k, v in args.items())
        gpus = inst.get("gpus")
        if gpus in (None, "", []):
            gpus = None
        elif isinstance(gpus, (list, tuple)):
            gpus = [_int(g, name, "vllm_instances[%s].gpus" % name) for g in gpus]
        else:
            gpus = [_int(g, name, "vllm_instances[%s].gpus" % name) for g in str(gpus).split(",")]
        util = args.get("gpu_memory_utilization")
        mml = args.get("max_model_len")
        tp = _int(args.get("tensor_parallel_size") or 1, name, "tensor_parallel_size")
        pp = _int(args.get("pipeline_parallel_size") or 1, name, "pipeline_parallel_size")
        dp = _int(args.get("data_parallel_size") or 1, name, "data_parallel_size")
        view = {
            "name": name,
            "model": inst.get("model"),
            "gpus": gpus,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "gpus_per_node": vllm_flags.gpus_per_node(tp, pp, dp, inst.get("nodes")),
            "nodes": list(inst["nodes"]) if vllm_flags.spans(inst.get("nodes")) else None,
            "gpu_memory_utilization": float(util) if util not in (None, "") else default,
            "max_model_len": _int(mml, name, "max_model_len") if mml not in (None, "", -1, "-1", "auto") else None,
            "args": dict((k, args[k]) for k in KV_OPTIONS if args.get(k) not in (None, "")),
        }
        out.append(view)
    return out


def option(view, key):
    """An option of an instance: the view's ``args`` (the options it runs with; the adapter's for
    entries built by :func:`instance_fields`), never parsed back out of the rendered argv."""
    return vllm_flags.lookup(view.get("args") or {}, key)[1]


def world_size(view):
    """The ranks the weights are split over (TP x PP, on all nodes of the instance together)."""
    return int(view.get("tensor_parallel_size") or 1) * int(view.get("pipeline_parallel_size") or 1)


def gpus_on_node(view):
    """The GPUs an instance runs on in this node: the view's ``gpus_per_node`` (entries
    written by hand without it: the same rule, vllm_flags.gpus_per_node)."""
    need = view.get("gpus_per_node")
    if need is None:
        need = vllm_flags.gpus_per_node(view.get("tensor_parallel_size") or 1,
                                        view.get("pipeline_parallel_size") or 1, 1, view.get("nodes"))
    return int(need or 0)


def _too_few(name, v, world, what):
    """The placement error of an instance that needs ``world`` GPUs here and gets fewer."""
    tp, pp = v.get("tensor_parallel_size") or 1, v.get("pipeline_parallel_size") or 1
    nodes = v.get("nodes")
    if not vllm_flags.spans(nodes):
        return ("instance %s: tensor_parallel_size %d x pipeline_parallel_size %d = %d GPUs, but %s. "
                "Fix: lower tensor_parallel_size / pipeline_parallel_size or give the instance more GPUs."
                % (name, tp, pp, world, what))
    return ("instance %s: tensor_parallel_size %d x pipeline_parallel_size %d = %d ranks over %d nodes (%s) = %d GPUs "
            "on each node, but %s. Fix: more GPUs per node, more nodes in vllm_instances[%s].nodes, or lower "
            "tensor_parallel_size / pipeline_parallel_size." % (name, tp, pp, tp * pp, len(nodes), ", ".join(str(n) for n in nodes),
                                                                world, what, name))


def placement(views, gpus):
    """Which GPUs each instance runs on, and the errors (each names instance, variable, fix).

    An instance runs on :func:`gpus_on_node` GPUs here (the view's ``gpus_per_node``:
    TP x PP x DP, or TP x PP / nodes for an instance that spans hosts). ``gpus``
    listed: vLLM sees only those (CUDA_VISIBLE_DEVICES) and uses the first of them.
    ``gpus`` unset: vLLM uses the host's first GPUs, so instances without ``gpus``
    share GPU 0 onwards. Returns ``(by_instance {name: [index]}, by_gpu {index: [view]}, errors)``.
    """
    host = [g.get("index") for g in gpus]
    by_instance, by_gpu, errors = {}, dict((i, []) for i in host), []
    for v in views:
        name = v.get("name")
        world = gpus_on_node(v)
        listed = v.get("gpus")
        if listed is None:
            used = host[:world]
            have, what = len(host), "the host has %d GPU(s) and vllm_instances[%s].gpus is unset" % (len(host), name)
        else:
            unknown = [i for i in listed if i not in host]
            if unknown:
                errors.append("instance %s: vllm_instances[%s].gpus lists GPU(s) %s, but this host has GPU(s) %s. "
                              "Fix: list GPUs of this host." % (name, name, unknown, host))
                continue
            used = listed[:world]
            have, what = len(listed), "vllm_instances[%s].gpus is %s" % (name, listed)
        if have < world:
            errors.append(_too_few(name, v, world, what))
            continue
        by_instance[name] = used
        for i in used:
            by_gpu[i].append(v)
    return by_instance, by_gpu, errors


def usable_mib(g):
    return (g.get("memory_total_mib") or 0) - (g.get("memory_reserved_mib") or 0)


def gpu_label(g):
    return "GPU %s (%s, %s)" % (g.get("index"), g.get("name"), g.get("pci_bus_id"))


def shares(by_gpu, gpus):
    """Per GPU: the instances on it and their summed gpu_memory_utilization."""
    out = []
    for g in gpus:
        on = by_gpu.get(g.get("index")) or []
        out.append({"gpu": g, "instances": on,
                    "utilization": round(sum(float(v.get("gpu_memory_utilization") or 0) for v in on), 4)})
    return out
