# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The GPU preflight checks: one function each, listed in :data:`CHECKS`.

Each check takes a :class:`Context` and returns ``(status, messages)`` with
status pass|fail|warn|skip; messages name the host, the GPU or instance and the
fix. :func:`preflight_report` runs the table on ``gpu_info`` facts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils import kv_capacity
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import memory
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", str(v or "")))


def driver_row(table, cuda_build):
    for row in table or []:
        if str(row.get("cuda")) == str(cuda_build):
            return row
    return None


_gpu_label = memory.gpu_label


class Context(object):
    """What every check reads: the facts, the settings and the instance placement."""

    def __init__(self, facts, settings):
        self.facts = facts
        self.s = dict(settings or {})
        self.host = self.s.get("host", "this host")
        self.gpus = facts.get("gpus") or []
        self.cuda = facts.get("mode") == "cuda"
        self.instances = list(self.s.get("instances") or [])
        self.by_instance, self.by_gpu, self.placement_errors = memory.placement(self.instances, self.gpus)
        self.row = driver_row(self.s.get("driver_table"), self.s.get("cuda_build"))


def check_driver_present(c):
    expect_gpu = c.s.get("expect_gpu")
    if c.cuda:
        return PASS, []
    if expect_gpu is True or (expect_gpu is None and c.facts.get("nvidia_smi_path")):
        why = c.facts.get("error") or "no NVIDIA GPU found"
        return FAIL, [
            "%s: no usable NVIDIA driver (%s). Fix: install the NVIDIA driver (>= %s for CUDA %s builds) and "
            "load it (nvidia-smi must list the GPUs), or set gpu_preflight_expect_gpu: false for a CPU-only host."
            % (c.host, why, (c.row or {}).get("min_driver", "?"), c.s.get("cuda_build"))]
    return SKIP, ["%s: mode cpu (%s); GPU checks skipped." % (c.host, c.facts.get("error") or "no GPU")]


def check_driver_version(c):
    row = c.row
    if not c.cuda:
        return SKIP, []
    if row is None:
        return FAIL, ["%s: gpu_preflight_cuda_build '%s' is not in gpu_preflight_driver_table (%s). "
                      "Fix: use one of those or add a row." % (
                          c.host, c.s.get("cuda_build"),
                          ", ".join(str(r.get("cuda")) for r in c.s.get("driver_table") or []))]
    drv = c.facts.get("driver_version")
    names = ", ".join(_gpu_label(g) for g in c.gpus)
    if version_tuple(drv) < version_tuple(row["min_driver"]):
        return FAIL, [
            "%s: NVIDIA driver %s (CUDA %s) on %s is older than %s, the minimum for the CUDA %s build of %s. "
            "Fix: install driver >= %s (recommended >= %s), or pin a build for an older CUDA "
            "(gpu_preflight_cuda_build)." % (
                c.host, drv, c.facts.get("cuda_driver_version"), names, row["min_driver"], row["cuda"],
                c.s.get("build_label", "vLLM/torch"), row["min_driver"], row.get("recommended_driver", row["min_driver"]))]
    if version_tuple(drv) < version_tuple(row.get("recommended_driver", row["min_driver"])):
        return WARN, [
            "%s: driver %s runs the CUDA %s build through minor-version compatibility only (no PTX JIT of newer "
            "PTX). Fix: upgrade to >= %s." % (c.host, drv, row["cuda"], row["recommended_driver"])]
    return PASS, []


def check_compute_capability(c):
    if not c.cuda:
        return SKIP, []
    low = [g for g in c.gpus if not g.get("flash_attn_arch")]
    if not low:
        return PASS, []
    return WARN, [
        "%s: %s has compute capability %s; the FlashAttention build needs >= 8.0 (sm_80/90/100/120). "
        "The flash_attn role skips such GPUs (it derives FLASH_ATTN_CUDA_ARCHS from llmops_gpu); vLLM serving "
        "goes on with its own attention backends. Fix: use an Ampere or newer GPU for FlashAttention." % (
            c.host, _gpu_label(g), g.get("compute_capability") or "unknown") for g in low]


def _var(v):
    return "vllm_instances[%s].args" % v.get("name")


def check_memory_total(c):
    """Per GPU: summed gpu_memory_utilization <= 1, and each instance's weights share fits its budget."""
    if not c.cuda:
        return SKIP, []
    if not c.instances:
        return SKIP, ["%s: no vLLM instances for this host (vllm_instances); memory check skipped." % c.host]
    msgs = list("%s: %s" % (c.host, e) for e in c.placement_errors)
    reserve_mib = float(c.s.get("reserve_gib") or 0) * 1024
    unknown = []
    for row in memory.shares(c.by_gpu, c.gpus):
        g, on = row["gpu"], row["instances"]
        total = memory.usable_mib(g)
        if row["utilization"] > 1.0:
            msgs.append(
                "%s: %s is shared by instances %s whose gpu_memory_utilization adds up to %.2f > 1; the later one "
                "fails with 'Free memory on device ... is less than desired GPU memory utilization'. Fix: give "
                "each instance its own vllm_instances[].gpus, or lower their gpu_memory_utilization so the sum "
                "is <= 1." % (c.host, _gpu_label(g), ", ".join("%s (%.2f)" % (v["name"], v["gpu_memory_utilization"])
                                                               for v in on), row["utilization"]))
        for v in on:
            w = v.get("weights")
            if not w:
                if v["name"] not in unknown:
                    unknown.append(v["name"])
                continue
            world = memory.world_size(v)
            util = float(v["gpu_memory_utilization"])
            need = w["bytes"] / float(world) / 1048576.0 + reserve_mib
            budget = total * util
            if need > budget:
                msgs.append(
                    "%s: %s has %d MiB usable x gpu_memory_utilization %.2f = %d MiB, but instance %s (%s) needs "
                    "about %d MiB: the model needs about %d MiB (weights %.1f GiB from %s / tensor_parallel_size "
                    "%d x pipeline_parallel_size %d, + %.1f GiB reserve). Fix: use a bigger GPU or more GPUs "
                    "(%s.tensor_parallel_size), a quantized model, or raise %s.gpu_memory_utilization." % (
                        c.host, _gpu_label(g), total, util, budget, v["name"], v.get("model"), need, need,
                        w["bytes"] / 1073741824.0, w.get("source"), v.get("tensor_parallel_size") or 1,
                        v.get("pipeline_parallel_size") or 1, reserve_mib / 1024, _var(v), _var(v)))
    if msgs:
        return FAIL, msgs
    if unknown and len(unknown) == len(c.instances):
        return SKIP, ["%s: no model size known for %s (config.json or *.safetensors not on the host yet); "
                      "weights check skipped." % (c.host, ", ".join(unknown))]
    return PASS, []


def check_memory_free(c):
    """Per GPU: free memory (plus our own vLLM's) >= summed utilization x total."""
    if not c.cuda:
        return SKIP, []
    pats = [re.compile(p) for p in c.s.get("own_process_patterns") or []]
    rows = memory.shares(c.by_gpu, c.gpus)
    msgs = []
    for row in rows:
        g = row["gpu"]
        util = row["utilization"] if row["instances"] else 0.0
        if not util:
            continue
        total = memory.usable_mib(g)
        procs = g.get("processes") or []
        own = [p for p in procs if any(r.search(p.get("name") or "") for r in pats)]
        free = (g.get("memory_free_mib") or 0) + sum(p.get("used_memory_mib") or 0 for p in own)
        if free < util * total:
            others = [p for p in procs if p not in own]
            who = ", ".join("PID %s %s (%s MiB)" % (p.get("pid"), p.get("name"), p.get("used_memory_mib"))
                            for p in others) or "processes not visible to nvidia-smi (another container?)"
            names = ", ".join(v["name"] for v in row["instances"])
            msgs.append(
                "%s: %s: other processes hold %d MiB, more than (1 - gpu_memory_utilization %.2f of instance(s) %s) "
                "x %d MiB = %d MiB, so vLLM would fail with 'Free memory on device ... is less than desired GPU "
                "memory utilization'. Held by: %s. Fix: stop them (or move them to another GPU), or lower "
                "gpu_memory_utilization to <= %.2f in total." % (
                    c.host, _gpu_label(g), total - free, util, names, total, (1.0 - util) * total, who,
                    max(0.0, int(100.0 * free / total) / 100.0) if total else 0))
    return (FAIL if msgs else PASS), msgs


def check_kv_cache(c):
    """Per instance: the predicted KV cache holds one max_model_len sequence, weights fit the share."""
    preds = [v for v in c.instances if v.get("kv")]
    if not preds:
        why = sorted(set(v.get("kv_skipped") for v in c.instances if v.get("kv_skipped")))
        return SKIP, ["%s: KV capacity not predicted (%s)." % (c.host, "; ".join(why) or "no instances")]
    msgs = [kv_capacity.refusal_message(c.host, v["name"], v["kv"], _var(v)) for v in preds]
    msgs = [m for m in msgs if m]
    return (FAIL if msgs else PASS), msgs


def check_ecc(c):
    if not c.cuda:
        return SKIP, []
    msgs = ["%s: %s has %d volatile uncorrectable ECC error(s) since the last driver load. Fix: drain the GPU, "
            "reset it (nvidia-smi -r -i %s) or reboot, then check remapped rows (nvidia-smi -q -d ROW_REMAPPER); "
            "replace the GPU if errors return." % (c.host, _gpu_label(g), g["ecc_volatile_uncorrectable"],
                                                   g.get("index"))
            for g in c.gpus if (g.get("ecc_volatile_uncorrectable") or 0) > 0]
    msgs += ["%s: %s has a row remapping pending. Fix: reset the GPU (nvidia-smi -r -i %s) or reboot."
             % (c.host, _gpu_label(g), g.get("index")) for g in c.gpus if g.get("remapped_rows_pending")]
    return (FAIL if msgs else PASS), msgs


def check_persistence(c):
    if not c.cuda:
        return SKIP, []
    msgs = ["%s: %s has persistence mode off: the driver unloads between processes (slow, flaky starts). "
            "Fix: enable nvidia-persistenced (or nvidia-smi -i %s -pm 1)." % (c.host, _gpu_label(g), g.get("index"))
            for g in c.gpus if g.get("persistence_enabled") is False]
    return (WARN if msgs else PASS), msgs


def check_mig(c):
    expect_mig = c.s.get("expect_mig")
    if not c.cuda or expect_mig is None:
        return SKIP, []
    msgs = []
    for g in c.gpus:
        cur = g.get("mig_enabled")
        if cur is None:
            if expect_mig:
                msgs.append("%s: %s does not support MIG but gpu_preflight_expect_mig is true. Fix: set it to false "
                            "or null for this host." % (c.host, _gpu_label(g)))
            continue
        if bool(cur) != bool(expect_mig):
            msgs.append(
                "%s: %s has MIG %s but the inventory expects it %s (gpu_preflight_expect_mig: %s). Fix: "
                "nvidia-smi -i %s -mig %d and reset the GPU, or correct gpu_preflight_expect_mig."
                % (c.host, _gpu_label(g), "enabled" if cur else "disabled", "enabled" if expect_mig else "disabled",
                   str(expect_mig).lower(), g.get("index"), 1 if expect_mig else 0))
        elif smi.flag(g.get("mig_mode_pending")) not in (None, cur):
            msgs.append("%s: %s has a MIG mode change pending. Fix: reset the GPU (nvidia-smi -r -i %s)."
                        % (c.host, _gpu_label(g), g.get("index")))
    return (FAIL if msgs else PASS), msgs


def check_fabric(c):
    if not c.cuda:
        return SKIP, []
    msgs = ["%s: %s fabric state is '%s' (status %s); NVSwitch GPUs cannot run CUDA work until the fabric is "
            "Completed. Fix: start nvidia-fabricmanager (same version as the driver)."
            % (c.host, _gpu_label(g), g["fabric"]["state"], g["fabric"].get("status"))
            for g in c.gpus if (g.get("fabric") or {}).get("state") not in (None, "Completed")]
    return (FAIL if msgs else (PASS if c.facts.get("fabric", {}).get("present") else SKIP)), msgs


def check_device_nodes(c):
    """Per CUDA instance: its unit's device policy opens every node CUDA needs for the GPUs it runs on
    (the view's ``device_problems``, from gpu/devices.py on the host's /proc/devices and /dev/nvidia*)."""
    if not c.cuda:
        return SKIP, []
    views = [v for v in c.instances if "device_problems" in v]
    if not views:
        return SKIP, ["%s: no vLLM instances for this host (vllm_instances); device nodes not checked." % c.host]
    msgs = ["%s: %s" % (c.host, m) for v in views for m in v["device_problems"]]
    return (FAIL if msgs else PASS), msgs


def check_nvcc(c):
    if not c.s.get("require_nvcc"):
        return SKIP, []
    build = c.s.get("cuda_build")
    if not c.facts.get("nvcc_version"):
        return FAIL, ["%s: nvcc not found (PATH and /usr/local/cuda/bin), needed to build FlashAttention. "
                      "Fix: install the CUDA toolkit %s (cuda-toolkit-%s) or set gpu_preflight_require_nvcc: false."
                      % (c.host, build, str(build).replace(".", "-"))]
    msgs = []
    nv = c.facts["nvcc_version"]
    drv_cuda = c.facts.get("cuda_driver_version")
    if c.cuda and drv_cuda and version_tuple(nv)[:2] > version_tuple(drv_cuda)[:2]:
        msgs.append("%s: nvcc is CUDA %s but driver %s supports CUDA <= %s; kernels it builds will not load. "
                    "Fix: install CUDA toolkit <= %s or upgrade the driver." % (c.host, nv, c.facts.get("driver_version"),
                                                                                drv_cuda, drv_cuda))
    if build and version_tuple(nv)[:1] != version_tuple(build)[:1]:
        msgs.append("%s: nvcc is CUDA %s but torch/vLLM are built for CUDA %s; torch refuses to build extensions "
                    "across CUDA major versions. Fix: install CUDA toolkit %s.x (cuda-toolkit-%s)."
                    % (c.host, nv, build, version_tuple(build)[0], str(build).replace(".", "-")))
    return (FAIL if msgs else PASS), msgs


def check_disk(c):
    msgs = []
    for d in c.s.get("disk") or []:
        free = d.get("free_bytes")
        need = float(d.get("min_free_gib") or 0)
        if free is None:
            msgs.append("%s: cannot read free space for %s. Fix: create the path or its parent." % (c.host, d.get("path")))
        elif free / 1073741824.0 < need:
            msgs.append("%s: %s (on %s) has %.1f GiB free, needs %.1f GiB for %s. Fix: free space or point the path "
                        "at a bigger filesystem." % (c.host, d.get("path"), d.get("checked_path"), free / 1073741824.0,
                                                     need, d.get("purpose") or "this path"))
    return (FAIL if msgs else (PASS if c.s.get("disk") else SKIP)), msgs


# The checks, in report order (name -> function). roles/gpu_preflight asserts each.
CHECKS = (
    ("driver_present", check_driver_present),
    ("driver_version", check_driver_version),
    ("compute_capability", check_compute_capability),
    ("memory_total", check_memory_total),
    ("memory_free", check_memory_free),
    ("kv_cache", check_kv_cache),
    ("ecc", check_ecc),
    ("persistence", check_persistence),
    ("mig", check_mig),
    ("fabric", check_fabric),
    ("device_nodes", check_device_nodes),
    ("nvcc", check_nvcc),
    ("disk", check_disk),
)


def preflight_report(facts, settings):
    """Run every check of :data:`CHECKS` on gpu_info facts; return the report dict.

    settings: host, cuda_build, build_label, driver_table, expect_gpu, expect_mig,
    require_nvcc, own_process_patterns, reserve_gib, disk, fail_on_warnings, and ``instances``: the
    instance view entries (see :mod:`.memory`), each optionally with ``weights``
    and ``kv`` (a :func:`kv_capacity.predict` result) from ``vllm_kv_predict``.
    """
    ctx = Context(facts, settings)
    checks = {}
    for name, fn in CHECKS:
        status, messages = fn(ctx)
        checks[name] = {"status": status, "messages": list(messages or [])}
    failed = [name for name, _fn in CHECKS if checks[name]["status"] == FAIL]
    fa_ok = bool(ctx.gpus) and all(g.get("flash_attn_arch") for g in ctx.gpus)
    order = [name for name, _fn in CHECKS]
    # The checks the role's assert fails on, in table order: failures, and warnings with fail_on_warnings.
    bad = (FAIL, WARN) if settings.get("fail_on_warnings") else (FAIL,)
    failing = [name for name in order if checks[name]["status"] in bad]
    return {
        "summary": ", ".join("%s=%s" % (name, checks[name]["status"]) for name in order),
        "failing": failing,
        "failing_message": " || ".join("%s: %s" % (name, " || ".join(checks[name]["messages"])) for name in failing),
        "checks": checks,
        "failed": sorted(failed),
        "failures": [m for k in sorted(failed) for m in checks[k]["messages"]],
        "warnings": [m for k in sorted(checks) if checks[k]["status"] == WARN for m in checks[k]["messages"]],
        "flash_attn_supported": bool(ctx.cuda and fa_ok),
        "cuda_archs": gpu_facts.cuda_archs(ctx.gpus) if ctx.cuda else [],
        "placement": ctx.by_instance,
    }
