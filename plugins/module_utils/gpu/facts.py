# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The ``llmops_gpu`` facts: one dict per GPU with derived keys, and the host keys.

Backends (nvidia-smi texts in :mod:`.smi`, NVML in :mod:`.nvml`) produce raw GPU
dicts; :func:`finish_gpu` adds the derived keys every backend shares and
:func:`host_facts` builds what the ``gpu_info`` module returns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi

# Compute capability by product name, used only when the driver cannot report
# it (legacy query). Sources: NVIDIA "CUDA GPUs" compute capability table.
_CC_BY_NAME = (
    (r"\bB200\b|\bB100\b|\bGB200\b", "10.0"),
    (r"RTX PRO 6000 Blackwell|RTX 50\d0|\bB40\b", "12.0"),
    (r"\bH100\b|\bH200\b|\bH800\b|\bH20\b|\bGH200\b", "9.0"),
    (r"\bL40S?\b|\bL4\b|\bL20\b|RTX 40\d0|RTX 6000 Ada|RTX 5000 Ada", "8.9"),
    (r"\bA100\b|\bA800\b|\bA30\b", "8.0"),
    (r"\bA10G?\b|\bA40\b|\bA16\b|\bA2\b|RTX 30\d0|RTX A\d000", "8.6"),
    (r"\bT4\b|RTX 20\d0|Quadro RTX", "7.5"),
    (r"\bV100\b|TITAN V", "7.0"),
    (r"\bP100\b", "6.0"),
    (r"\bP40\b|\bP4\b", "6.1"),
)


def split_cc(cc):
    """'9.0' -> (9, 0); None when unknown."""
    if cc is None:
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(cc))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2))


def cc_from_name(name):
    for pattern, cc in _CC_BY_NAME:
        if name and re.search(pattern, name):
            return cc
    return None


def finish_gpu(g):
    """Derived keys shared by every backend."""
    g.setdefault("processes", [])
    g.setdefault("mig_devices", [])
    g.setdefault("fabric", {"state": None, "status": None, "clique_id": None, "cluster_uuid": None})
    g["compute_capability_source"] = "driver" if g.get("compute_capability") else None
    if not g.get("compute_capability"):
        cc = cc_from_name(g.get("name"))
        if cc:
            g["compute_capability"] = cc
            g["compute_capability_source"] = "name"
    cc = split_cc(g.get("compute_capability"))
    g["compute_capability_major"] = cc[0] if cc else None
    g["compute_capability_minor"] = cc[1] if cc else None
    g["flash_attn_arch"] = flash_attn_arch(g.get("compute_capability"))
    g["persistence_enabled"] = smi.flag(g.get("persistence_mode"))
    g["mig_enabled"] = smi.flag(g.get("mig_mode_current"))
    g["ecc_enabled"] = smi.flag(g.get("ecc_mode_current"))
    g["processes_memory_mib"] = sum(p.get("used_memory_mib") or 0 for p in g["processes"])
    return g


def merge_smi(csv_gpus, xml_host, xml_gpus):
    """Join CSV rows and XML GPUs on the PCI bus id (CSV wins for shared keys)."""
    by_bus = dict((x["pci_bus_id"], x) for x in xml_gpus)
    out = []
    for i, row in enumerate(csv_gpus):
        g = dict(by_bus.pop(row.get("pci_bus_id"), None) or {})
        for k, v in row.items():
            if v is not None or k not in g:
                g[k] = v
        g.pop("driver_version", None)
        if g.get("index") is None:
            g["index"] = i
        out.append(finish_gpu(g))
    # GPUs the XML knows but the CSV did not list (CSV missing): keep them.
    start = len(out)
    for j, x in enumerate(by_bus.values()):
        g = dict(x)
        g.setdefault("index", x.get("minor_number") if not csv_gpus else start + j)
        out.append(finish_gpu(g))
    out.sort(key=lambda g: (g.get("index") is None, g.get("index")))
    driver = xml_host.get("driver_version") if xml_host else None
    if not driver:
        driver = next((r.get("driver_version") for r in csv_gpus if r.get("driver_version")), None)
    return driver, out


def flash_attn_arch(cc):
    """FLASH_ATTN_CUDA_ARCHS entry for a compute capability (None: not built for it).

    The map lives in module_utils/flash_attn.py (one copy for the role and the facts).
    """
    if not split_cc(cc):
        return None
    return fa.arch_for_compute_capability(cc)[0]


def cuda_archs(gpus):
    archs = set(g.get("flash_attn_arch") for g in gpus if g.get("flash_attn_arch"))
    return sorted(archs, key=int)


def host_facts(mode, source, driver_version, cuda_driver_version, gpus, nvcc=None, error=None,
               nvidia_smi_path=None, nvcc_path=None):
    fabric_states = sorted(set(g["fabric"].get("state") for g in gpus if g.get("fabric", {}).get("state")))
    return {
        "mode": mode,
        "source": source,
        "error": error,
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "nvidia_smi_path": nvidia_smi_path,
        "nvcc_path": nvcc_path,
        "nvcc_version": nvcc["version"] if nvcc else None,
        "nvcc_build": nvcc["build"] if nvcc else None,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "gpu_names": sorted(set(g.get("name") for g in gpus if g.get("name"))),
        "memory_total_mib": sum(g.get("memory_total_mib") or 0 for g in gpus),
        "cuda_archs": cuda_archs(gpus),
        "fabric": {
            "present": bool(fabric_states),
            "states": fabric_states,
        },
    }


def facts_from_smi(csv_text, xml_text, nvcc_text=None, nvidia_smi_path=None, nvcc_path=None,
                   fields=smi.QUERY_FIELDS):
    """Facts from the texts nvidia-smi printed (either text may be None)."""
    csv_gpus = smi.parse_query_csv(csv_text, fields) if csv_text else []
    xml_host, xml_gpus = smi.parse_nvsmi_xml(xml_text) if xml_text else ({}, [])
    driver, gpus = merge_smi(csv_gpus, xml_host, xml_gpus)
    nvcc = smi.parse_nvcc_version(nvcc_text) if nvcc_text else None
    mode = "cuda" if gpus else "cpu"
    return host_facts(mode, "nvidia-smi", driver, xml_host.get("cuda_driver_version"), gpus, nvcc,
                      None if gpus else "nvidia-smi listed no GPU",
                      nvidia_smi_path, nvcc_path)


def cpu_facts(error, nvidia_smi_path=None, nvcc_text=None, nvcc_path=None, driver_version=None):
    nvcc = smi.parse_nvcc_version(nvcc_text) if nvcc_text else None
    return host_facts("cpu", "none", driver_version, None, [], nvcc, error, nvidia_smi_path, nvcc_path)
