# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""GPU facts through NVML (nvidia-ml-py), the ``gpu_info`` module's preferred backend."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi


def _s(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def facts_from_nvml(pynvml, proc_name=None):
    """Facts through nvidia-ml-py. Raises pynvml.NVMLError when NVML cannot start."""
    nv = pynvml
    nv.nvmlInit()
    try:
        def opt(fn, *a):
            try:
                return fn(*a)
            except Exception:  # NVMLError_NotSupported and friends: a fact we cannot have
                return None

        driver = _s(nv.nvmlSystemGetDriverVersion())
        cuda = smi.cuda_version_from_int(opt(nv.nvmlSystemGetCudaDriverVersion_v2)
                                         or opt(nv.nvmlSystemGetCudaDriverVersion))
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = None
            if hasattr(nv, "nvmlMemory_v2"):
                mem = opt(nv.nvmlDeviceGetMemoryInfo, h, nv.nvmlMemory_v2)
            if mem is None:
                mem = opt(nv.nvmlDeviceGetMemoryInfo, h)
            mib = 1024 * 1024
            cc = opt(nv.nvmlDeviceGetCudaComputeCapability, h)
            mig = opt(nv.nvmlDeviceGetMigMode, h)
            ecc = opt(nv.nvmlDeviceGetEccMode, h)
            pm = opt(nv.nvmlDeviceGetPersistenceMode, h)
            unc = opt(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
            cor = opt(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
            power = opt(nv.nvmlDeviceGetPowerUsage, h)
            limit = opt(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            pci = opt(nv.nvmlDeviceGetPciInfo, h)
            procs = []
            for p in (opt(nv.nvmlDeviceGetComputeRunningProcesses, h) or []):
                used = getattr(p, "usedGpuMemory", None)
                name = None
                if proc_name is not None:
                    name = proc_name(p.pid)
                if not name:
                    name = _s(opt(nv.nvmlSystemGetProcessName, p.pid))
                procs.append({
                    "pid": p.pid, "type": "C", "name": name,
                    "used_memory_mib": used // mib if isinstance(used, int) else None,
                    "gpu_instance_id": getattr(p, "gpuInstanceId", None),
                    "compute_instance_id": getattr(p, "computeInstanceId", None),
                })
            fabric = {"state": None, "status": None, "clique_id": None, "cluster_uuid": None}
            finfo = opt(nv.nvmlDeviceGetGpuFabricInfo, h) if hasattr(nv, "nvmlDeviceGetGpuFabricInfo") else None
            if finfo is not None:
                states = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
                st = states.get(getattr(finfo, "state", None))
                fabric = {"state": None if st == "Not Supported" else st,
                          "status": "Success" if getattr(finfo, "status", 1) == 0 else None,
                          "clique_id": getattr(finfo, "cliqueId", None), "cluster_uuid": None}
            reserved = getattr(mem, "reserved", None) if mem is not None else None
            g = {
                "index": i,
                "name": _s(opt(nv.nvmlDeviceGetName, h)),
                "uuid": _s(opt(nv.nvmlDeviceGetUUID, h)),
                "pci_bus_id": smi.normalize_bus_id(_s(getattr(pci, "busId", None))) if pci is not None else None,
                "minor_number": opt(nv.nvmlDeviceGetMinorNumber, h),
                "memory_total_mib": mem.total // mib if mem is not None else None,
                "memory_reserved_mib": reserved // mib if isinstance(reserved, int) else None,
                "memory_used_mib": mem.used // mib if mem is not None else None,
                "memory_free_mib": mem.free // mib if mem is not None else None,
                "compute_capability": "%d.%d" % tuple(cc) if cc else None,
                "temperature_c": opt(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                "power_draw_w": round(power / 1000.0, 2) if power is not None else None,
                "power_limit_w": round(limit / 1000.0, 2) if limit is not None else None,
                "utilization_gpu_pct": getattr(opt(nv.nvmlDeviceGetUtilizationRates, h), "gpu", None),
                "persistence_mode": None if pm is None else ("Enabled" if pm else "Disabled"),
                "mig_mode_current": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
                "mig_mode_pending": None if mig is None else ("Enabled" if mig[1] else "Disabled"),
                "ecc_mode_current": None if ecc is None else ("Enabled" if ecc[0] else "Disabled"),
                "ecc_mode_pending": None if ecc is None else ("Enabled" if ecc[1] else "Disabled"),
                "ecc_volatile_uncorrectable": unc if ecc and ecc[0] else None,
                "ecc_volatile_correctable": cor if ecc and ecc[0] else None,
                "processes": procs,
                "fabric": fabric,
            }
            gpus.append(gpu_facts.finish_gpu(g))
        return driver, cuda, gpus
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
