# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Layer 2: ranges and consistency that need no vLLM: ports, gpu_memory_utilization
in (0, 1] and its sum on shared GPUs, kv_cache_dtype choices, the GPUs an
instance needs on this node (``gpus_per_node``, the rule) <= GPUs assigned, the
uni executor with more than one worker, ``gpus`` indexes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import ports as port_rule
from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.knobs import DEFAULT_GPU_MEMORY_UTILIZATION, KV_CACHE_DTYPES
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import as_int, inst_path, lookup, merged_options, option_source, problem


def spans(nodes):
    """Whether an instance's ``nodes`` value makes it span hosts (vllm_multinode.is_multinode)."""
    return nodes not in (None, "", [])


def gpus_per_node(tensor_parallel_size, pipeline_parallel_size, data_parallel_size=1, nodes=None):
    """The GPUs an instance runs on in ONE node: the rule, written once.

    A spanning instance (``nodes``: its hosts, vllm_multinode.py) runs
    TP x PP / len(nodes) ranks on each node - vLLM's layout: every node runs
    its share of the world (``--nnodes``: the multiproc executor's local world
    size; ``ray``: the layout of GPUs per node x nodes the ray_cluster role
    declares) - so one node needs that many GPUs; None when TP x PP does not
    split evenly over the nodes (vllm_multinode.check says so, naming the fix).
    A single-host instance needs TP x PP x DP. The instance view keeps the
    result (field ``gpus_per_node``); check_ranges and gpu/memory.py read it
    from there.
    """
    world = int(tensor_parallel_size) * int(pipeline_parallel_size)
    if spans(nodes):
        count = len(nodes) if isinstance(nodes, (list, tuple)) else 1
        return world // count if world % count == 0 else None
    return world * int(data_parallel_size)


def _gpus_problem(i, inst, sizes, need, assigned, where, gpu_count):
    """The message when an instance needs more GPUs on this node than it is given."""
    path = (sizes["tensor_parallel_size"][1] or sizes["pipeline_parallel_size"][1]
            or sizes["data_parallel_size"][1] or inst_path(i))
    tp, pp, dp = (sizes["tensor_parallel_size"][0], sizes["pipeline_parallel_size"][0],
                  sizes["data_parallel_size"][0])
    if not spans(inst.get("nodes")):
        return problem(path, "--tensor-parallel-size", "range",
                       "%s: tensor_parallel_size x pipeline_parallel_size x data_parallel_size = %d x %d x %d = %d "
                       "GPUs, but %s gives %d; lower the sizes or assign more GPUs in %s"
                       % (path, tp, pp, dp, need, where, assigned, inst_path(i, "gpus")))
    nodes = inst["nodes"]
    nodes, world = [str(n) for n in nodes] if isinstance(nodes, (list, tuple)) else [str(nodes)], tp * pp
    if inst.get("gpus") is not None and (gpu_count is None or int(gpu_count) >= need):
        more_gpus = "list %d GPUs in %s" % (need, inst_path(i, "gpus"))
    else:
        more_gpus = "nodes with %d GPUs or more" % need
    fits = [n for n in range(len(nodes) + 1, world + 1) if world % n == 0 and world // n <= assigned]
    more_nodes = ("%d nodes in %s (%d ranks / %d = %d GPUs a node)" % (fits[0], inst_path(i, "nodes"), world,
                                                                       fits[0], world // fits[0])
                  if fits else "more nodes in %s" % inst_path(i, "nodes"))
    return problem(path, "--tensor-parallel-size", "range",
                   "%s: instance %s spans %d nodes (%s): tensor_parallel_size x pipeline_parallel_size = %d x %d = "
                   "%d ranks / %d nodes = %d GPUs needed on each node, but on this node %s gives %d. Fix: %s, %s, "
                   "or lower tensor_parallel_size x pipeline_parallel_size to %d x %d nodes = %d or less"
                   % (path, inst.get("name"), len(nodes), ", ".join(nodes), tp, pp, world, len(nodes), need, where,
                      assigned, more_gpus, more_nodes, assigned, len(nodes), assigned * len(nodes)))


def check_ranges(instances, common_args=None, gpu_count=None, device="auto",
                 default_gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION, views=None):
    """Range and consistency problems that need no vLLM.

    ``instances``: as they run (a spanning instance with the options
    vllm_multinode adds, see vllm_multinode.running_instance).
    ``default_gpu_memory_utilization``: the share an instance without the
    option takes (the role's vllm_default_gpu_memory_utilization).
    ``views``: the instance view entries of ``instances`` (same order), when
    there is a view: each instance's GPUs on this node is its entry's
    ``gpus_per_node``; without a view (or the field), ``gpus_per_node()``.
    """
    problems = []
    ports = {}
    gpu_share = {}
    unpinned = []
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            continue
        opts = merged_options(inst, common_args)

        # Port: an instance's (module_utils/ports.py, the one port rule).
        port = inst.get("port", 8000)
        msg = port_rule.problem("instance", inst_path(i, "port"), port)
        if msg:
            problems.append(problem(inst_path(i, "port"), "--port", "range", msg))
        else:
            port_i = port_rule.as_port(port)
            if port_i in ports:
                problems.append(problem(inst_path(i, "port"), "--port", "range",
                                        "%s: port %d is also used by %s; give every instance its own port"
                                        % (inst_path(i, "port"), port_i, inst_path(ports[port_i], "port"))))
            ports.setdefault(port_i, i)

        # gpu_memory_utilization in (0, 1].
        key, gmu = lookup(opts, "gpu_memory_utilization", "device_memory_utilization")
        gmu_f = None
        if key is not None:
            path = option_source(i, inst, common_args, key)
            try:
                if isinstance(gmu, bool):
                    raise ValueError(gmu)
                gmu_f = float(gmu)
                if not 0.0 < gmu_f <= 1.0:
                    raise ValueError(gmu)
            except (TypeError, ValueError):
                gmu_f = None
                problems.append(problem(path, "--gpu-memory-utilization", "range",
                                        "%s: gpu_memory_utilization is the share of each GPU's total memory "
                                        "this instance may take and must be in (0, 1] (got %r), e.g. 0.90"
                                        % (path, gmu)))

        # kv_cache_dtype choices.
        key, kvd = lookup(opts, "kv_cache_dtype")
        if key is not None and str(kvd) not in KV_CACHE_DTYPES:
            path = option_source(i, inst, common_args, key)
            problems.append(problem(path, "--kv-cache-dtype", "range",
                                    "%s: kv_cache_dtype %r is not a vLLM choice; use one of %s "
                                    "(fp8 = fp8_e4m3 on Hopper)" % (path, kvd, ", ".join(KV_CACHE_DTYPES))))

        # Parallel sizes vs GPUs assigned.
        sizes = {}
        for names, label in ((("tensor_parallel_size", "tp"), "tensor_parallel_size"),
                             (("pipeline_parallel_size", "pp"), "pipeline_parallel_size"),
                             (("data_parallel_size", "dp"), "data_parallel_size")):
            key, val = lookup(opts, *names)
            if key is None:
                sizes[label] = (1, None)
                continue
            path = option_source(i, inst, common_args, key)
            try:
                v = as_int(val)
                if v < 1:
                    raise ValueError(val)
                sizes[label] = (v, path)
            except (TypeError, ValueError):
                problems.append(problem(path, vllm_args.option_flag(label), "range",
                                        "%s: %s must be an integer >= 1 (got %r)" % (path, label, val)))
                sizes[label] = (1, path)
        # The uni executor runs the whole engine in one process: with more than
        # one worker it waits forever for peers that never start.
        key, backend = lookup(opts, "distributed_executor_backend")
        world = sizes["tensor_parallel_size"][0] * sizes["pipeline_parallel_size"][0]
        if key is not None and str(backend) == "uni" and world > 1:
            # Name the size(s) the user set above 1, not a fixed one.
            over = [label for label in ("tensor_parallel_size", "pipeline_parallel_size") if sizes[label][0] > 1]
            path = sizes[over[0]][1]
            problems.append(problem(path, "--distributed-executor-backend", "range",
                                    "%s: tensor_parallel_size x pipeline_parallel_size = %d x %d = %d needs %d "
                                    "worker processes, but distributed_executor_backend is `uni` (%s; one "
                                    "process): the engine would wait for its peers until the readiness timeout. "
                                    "Use %s, or distributed_executor_backend: mp (one process per worker; it "
                                    "needs room in /dev/shm)"
                                    % (path, sizes["tensor_parallel_size"][0], sizes["pipeline_parallel_size"][0],
                                       world, world, option_source(i, inst, common_args, key),
                                       " and ".join("%s: 1 (%s)" % (label, sizes[label][1]) for label in over))))
        gpus = inst.get("gpus")
        if gpus is not None and not isinstance(gpus, (list, tuple)):
            problems.append(problem(inst_path(i, "gpus"), None, "type",
                                    "%s must be a list of GPU indexes, e.g. [0, 1]" % inst_path(i, "gpus")))
            gpus = None
        if gpus is not None and len(set(str(g) for g in gpus)) != len(gpus):
            problems.append(problem(inst_path(i, "gpus"), None, "range",
                                    "%s lists a GPU twice: %r" % (inst_path(i, "gpus"), list(gpus))))
        if device == "cuda":
            assigned, where = None, None
            if gpus is not None:
                assigned, where = len(gpus), "%s (%r)" % (inst_path(i, "gpus"), list(gpus))
            elif gpu_count is not None:
                assigned, where = int(gpu_count), "the host's GPU count"
            needed = (views[i] if views is not None and i < len(views) else {}).get("gpus_per_node")
            if needed is None:
                needed = gpus_per_node(sizes["tensor_parallel_size"][0], sizes["pipeline_parallel_size"][0],
                                       sizes["data_parallel_size"][0], inst.get("nodes"))
            if assigned is not None and needed is not None and needed > assigned:
                problems.append(_gpus_problem(i, inst, sizes, needed, assigned, where, gpu_count))
            if gpus is not None and gpu_count is not None:
                bad = [g for g in gpus if not str(g).isdigit() or int(g) >= int(gpu_count)]
                if bad:
                    problems.append(problem(inst_path(i, "gpus"), None, "range",
                                            "%s: GPU(s) %r do not exist on this host (%d GPUs: 0..%d)"
                                            % (inst_path(i, "gpus"), bad, int(gpu_count), int(gpu_count) - 1)))
            share = gmu_f if gmu_f is not None else float(default_gpu_memory_utilization)
            if gpus is not None:
                for g in gpus:
                    gpu_share.setdefault(str(g), []).append((i, share))
            else:
                unpinned.append((i, share))
    # An instance without `gpus` sees every GPU of the host and takes its
    # share of each: on a multi-instance host it shares them all.
    pinned = set(i for users in gpu_share.values() for i, dummy in users)
    if unpinned and len(unpinned) + len(pinned) > 1:
        all_gpus = set(gpu_share) or set(["(every GPU)"])
        if gpu_count is not None:
            all_gpus |= set(str(g) for g in range(int(gpu_count)))
        for g in all_gpus:
            gpu_share.setdefault(g, []).extend(unpinned)
    for gpu, users in sorted(gpu_share.items()):
        total = sum(s for dummy, s in users)
        if len(users) > 1 and total > 1.0 + 1e-9:
            names = ", ".join("%s=%.2f" % (inst_path(i), s) for i, s in users)
            problems.append(problem(inst_path(users[-1][0], "gpus"), "--gpu-memory-utilization", "range",
                                    "GPU %s is shared by %s: gpu_memory_utilization adds up to %.2f > 1 "
                                    "(an instance without the option takes vllm_default_gpu_memory_utilization "
                                    "= %.2f; an instance without `gpus` uses every GPU); give each instance its "
                                    "own GPUs (`gpus: [N]`) or lower the shares"
                                    % (gpu, names, total, float(default_gpu_memory_utilization))))
    return problems
