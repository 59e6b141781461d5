# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""GPU facts: parse nvidia-smi / nvcc output, read NVML, and run preflight checks.

Everything here is pure Python (no Ansible imports) so that the module
(``gpu_info``), the filter (``gpu_preflight_report``) and the unit tests share
one implementation. Parsers take the text that the real tools print:

* ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``
  (the ``--format=csv`` form with a header and units is accepted too);
* ``nvidia-smi -q -x`` (XML, DTD ``nvsmi_device_v13``; older DTDs are read
  where the tags are the same);
* ``nvcc --version``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import re
import xml.etree.ElementTree as ET

# The fields of the real H200 capture (tests/fixtures/nvidia-smi/h200/probe.txt),
# in that order, so a capture can be replayed exactly.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_cap",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "persistence_mode",
    "mig.mode.current",
    "ecc.mode.current",
)
# Drivers older than ~510 reject the whole query when one field is unknown
# ("Field "compute_cap" is not a valid field to query."): retry without it.
QUERY_FIELDS_LEGACY = tuple(f for f in QUERY_FIELDS if f != "compute_cap")

NO_DRIVER_MARKERS = (
    "couldn't communicate with the nvidia driver",
    "no devices were found",
    "nvml: driver not loaded",
    "driver/library version mismatch",
    "unable to determine the device handle",
)

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

_NA = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", "none")
_UNIT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:MiB|W|C|%|MHz|KB/s|us|bank\(s\))?\s*$")


def _clean(value):
    if value is None:
        return None
    value = value.strip()
    if value.lower() in _NA:
        return None
    return value


def _num(value, cast=float):
    """'143771 MiB' -> 143771, '79.89 W' -> 79.89, 'N/A' -> None."""
    value = _clean(value)
    if value is None:
        return None
    m = _UNIT_RE.match(value)
    if not m:
        return None
    try:
        return cast(float(m.group(1))) if cast is int else cast(m.group(1))
    except ValueError:
        return None


def _flag(value):
    """Enabled/Disabled/On/Off -> True/False, else None."""
    value = _clean(value)
    if value is None:
        return None
    low = value.lower()
    if low in ("enabled", "on", "yes", "true", "1"):
        return True
    if low in ("disabled", "off", "no", "false", "0"):
        return False
    return None


def normalize_bus_id(bus_id):
    """Canonical PCI bus id: 8-hex-digit domain, upper case ('00000000:00:06.0')."""
    if not bus_id:
        return None
    bus_id = bus_id.strip()
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)$", bus_id)
    if not m:
        return bus_id.upper()
    dom, bus, dev, fn = m.groups()
    return "%08X:%02X:%02X.%s" % (int(dom, 16), int(bus, 16), int(dev, 16), fn.upper())


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


def query_gpu_argv(nvidia_smi, fields=QUERY_FIELDS):
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def is_no_driver_output(text):
    low = (text or "").lower()
    return any(m in low for m in NO_DRIVER_MARKERS)


def parse_query_csv(text, fields=QUERY_FIELDS):
    """Parse ``--query-gpu`` CSV (with or without header and units) into dicts.

    Keys are the query field names. Numbers become int/float, N/A becomes None.
    """
    rows = []
    reader = csv.reader([line for line in (text or "").splitlines() if line.strip()], skipinitialspace=True)
    for row in reader:
        if row and row[0].strip().lower() == "index":
            continue  # header line of --format=csv
        if len(row) != len(fields):
            raise ValueError("nvidia-smi --query-gpu returned %d columns, expected %d (%s): %r"
                             % (len(row), len(fields), ",".join(fields), row))
        rows.append(dict(zip(fields, [c.strip() for c in row])))
    gpus = []
    for r in rows:
        g = {
            "index": _num(r.get("index"), int),
            "name": _clean(r.get("name")),
            "uuid": _clean(r.get("uuid")),
            "pci_bus_id": normalize_bus_id(_clean(r.get("pci.bus_id"))),
            "driver_version": _clean(r.get("driver_version")),
            "memory_total_mib": _num(r.get("memory.total"), int),
            "memory_used_mib": _num(r.get("memory.used"), int),
            "memory_free_mib": _num(r.get("memory.free"), int),
            "compute_capability": _clean(r.get("compute_cap")),
            "temperature_c": _num(r.get("temperature.gpu"), int),
            "power_draw_w": _num(r.get("power.draw")),
            "utilization_gpu_pct": _num(r.get("utilization.gpu"), int),
            "persistence_mode": _clean(r.get("persistence_mode")),
            "mig_mode_current": _clean(r.get("mig.mode.current")),
            "ecc_mode_current": _clean(r.get("ecc.mode.current")),
        }
        gpus.append(g)
    return gpus


def _text(el, path):
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _sum_ints(values):
    nums = [v for v in values if v is not None]
    return sum(nums) if nums else None


def parse_nvsmi_xml(text):
    """Parse ``nvidia-smi -q -x`` into host keys and a list of GPU dicts."""
    # The DOCTYPE names a DTD file that is not there; ElementTree ignores it.
    root = ET.fromstring(text.encode("utf-8") if isinstance(text, str) else text)
    host = {
        "driver_version": _clean(_text(root, "driver_version")),
        "cuda_driver_version": _clean(_text(root, "cuda_version")),
        "attached_gpus": _num(_text(root, "attached_gpus"), int),
    }
    gpus = []
    for g in root.findall("gpu"):
        vol = g.find("ecc_errors/volatile")
        if vol is not None:
            # v13 DTD: sram_uncorrectable_parity/_secded + dram_uncorrectable;
            # older: sram_uncorrectable + dram_uncorrectable; oldest: double_bit/total.
            unc = _sum_ints(_num(c.text, int) for c in vol if "uncorrectable" in c.tag)
            cor = _sum_ints(_num(c.text, int) for c in vol if c.tag.endswith("correctable") and "uncorrectable" not in c.tag)
            if unc is None:
                unc = _num(_text(vol, "double_bit/total"), int)
            if cor is None:
                cor = _num(_text(vol, "single_bit/total"), int)
        else:
            unc = cor = None
        procs = []
        for p in g.findall("processes/process_info"):
            procs.append({
                "pid": _num(_text(p, "pid"), int),
                "type": _clean(_text(p, "type")),
                "name": _clean(_text(p, "process_name")),
                "used_memory_mib": _num(_text(p, "used_memory"), int),
                "gpu_instance_id": _num(_text(p, "gpu_instance_id"), int),
                "compute_instance_id": _num(_text(p, "compute_instance_id"), int),
            })
        migs = []
        for m in g.findall("mig_devices/mig_device"):
            migs.append({
                "index": _num(_text(m, "index"), int),
                "gpu_instance_id": _num(_text(m, "gpu_instance_id"), int),
                "compute_instance_id": _num(_text(m, "compute_instance_id"), int),
                "memory_total_mib": _num(_text(m, "fb_memory_usage/total"), int),
                "memory_used_mib": _num(_text(m, "fb_memory_usage/used"), int),
                "multiprocessor_count": _num(_text(m, "device_attributes/shared/multiprocessor_count"), int),
            })
        fabric = g.find("fabric")
        gpus.append({
            "pci_bus_id": normalize_bus_id(g.get("id")),
            "name": _clean(_text(g, "product_name")),
            "architecture": _clean(_text(g, "product_architecture")),
            "uuid": _clean(_text(g, "uuid")),
            "minor_number": _num(_text(g, "minor_number"), int),
            "persistence_mode": _clean(_text(g, "persistence_mode")),
            "mig_mode_current": _clean(_text(g, "mig_mode/current_mig")),
            "mig_mode_pending": _clean(_text(g, "mig_mode/pending_mig")),
            "mig_devices": migs,
            "ecc_mode_current": _clean(_text(g, "ecc_mode/current_ecc")),
            "ecc_mode_pending": _clean(_text(g, "ecc_mode/pending_ecc")),
            "ecc_volatile_uncorrectable": unc,
            "ecc_volatile_correctable": cor,
            "remapped_rows_pending": _flag(_text(g, "remapped_rows/remapped_row_pending")),
            "remapped_rows_failure": _flag(_text(g, "remapped_rows/remapped_row_failure")),
            "memory_total_mib": _num(_text(g, "fb_memory_usage/total"), int),
            "memory_reserved_mib": _num(_text(g, "fb_memory_usage/reserved"), int),
            "memory_used_mib": _num(_text(g, "fb_memory_usage/used"), int),
            "memory_free_mib": _num(_text(g, "fb_memory_usage/free"), int),
            "compute_mode": _clean(_text(g, "compute_mode")),
            "temperature_c": _num(_text(g, "temperature/gpu_temp"), int),
            "power_draw_w": _num(_text(g, "gpu_power_readings/instant_power_draw"))
            or _num(_text(g, "gpu_power_readings/power_draw"))
            or _num(_text(g, "power_readings/power_draw")),
            "power_limit_w": _num(_text(g, "gpu_power_readings/current_power_limit"))
            or _num(_text(g, "power_readings/power_limit")),
            "processes": procs,
            "fabric": {
                "state": _clean(_text(fabric, "state")),
                "status": _clean(_text(fabric, "status")),
                "clique_id": _clean(_text(fabric, "cliqueId")),
                "cluster_uuid": _clean(_text(fabric, "clusterUuid")),
            },
        })
    return host, gpus


def parse_nvcc_version(text):
    """'Cuda compilation tools, release 13.0, V13.0.88' -> {'version': '13.0', 'build': '13.0.88'}."""
    m = re.search(r"release\s+(\d+\.\d+)\s*,\s*V(\d+\.\d+\.\d+)", text or "")
    if not m:
        return None
    return {"version": m.group(1), "build": m.group(2)}


def cuda_version_from_int(value):
    """NVML's CUDA driver version integer (13000) -> '13.0'."""
    if value is None:
        return None
    value = int(value)
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def _finish_gpu(g):
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
    g["persistence_enabled"] = _flag(g.get("persistence_mode"))
    g["mig_enabled"] = _flag(g.get("mig_mode_current"))
    g["ecc_enabled"] = _flag(g.get("ecc_mode_current"))
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
        out.append(_finish_gpu(g))
    # GPUs the XML knows but the CSV did not list (CSV missing): keep them.
    start = len(out)
    for j, x in enumerate(by_bus.values()):
        g = dict(x)
        g.setdefault("index", x.get("minor_number") if not csv_gpus else start + j)
        out.append(_finish_gpu(g))
    out.sort(key=lambda g: (g.get("index") is None, g.get("index")))
    driver = xml_host.get("driver_version") if xml_host else None
    if not driver:
        driver = next((r.get("driver_version") for r in csv_gpus if r.get("driver_version")), None)
    return driver, out


def flash_attn_arch(cc):
    """FLASH_ATTN_CUDA_ARCHS entry for a compute capability (None: not built for it).

    flash-attn 2.8.3 builds 80;90;100;120. Ampere/Ada (8.x) run the sm_80 code.
    """
    parts = split_cc(cc)
    if not parts:
        return None
    return {8: "80", 9: "90", 10: "100", 12: "120"}.get(parts[0])


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
                   fields=QUERY_FIELDS):
    """Facts from the texts nvidia-smi printed (either text may be None)."""
    csv_gpus = parse_query_csv(csv_text, fields) if csv_text else []
    xml_host, xml_gpus = parse_nvsmi_xml(xml_text) if xml_text else ({}, [])
    driver, gpus = merge_smi(csv_gpus, xml_host, xml_gpus)
    nvcc = parse_nvcc_version(nvcc_text) if nvcc_text else None
    mode = "cuda" if gpus else "cpu"
    return host_facts(mode, "nvidia-smi", driver, xml_host.get("cuda_driver_version"), gpus, nvcc,
                      None if gpus else "nvidia-smi listed no GPU",
                      nvidia_smi_path, nvcc_path)


def cpu_facts(error, nvidia_smi_path=None, nvcc_text=None, nvcc_path=None, driver_version=None):
    nvcc = parse_nvcc_version(nvcc_text) if nvcc_text else None
    return host_facts("cpu", "none", driver_version, None, [], nvcc, error, nvidia_smi_path, nvcc_path)


# --------------------------------------------------------------------------- NVML
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
        cuda = cuda_version_from_int(opt(nv.nvmlSystemGetCudaDriverVersion_v2)
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
                "pci_bus_id": normalize_bus_id(_s(getattr(pci, "busId", None))) if pci is not None else None,
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
            gpus.append(_finish_gpu(g))
        return driver, cuda, gpus
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


# ------------------------------------------------------------------ weights estimate
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


# ------------------------------------------------------------------- preflight checks
def version_tuple(v):
    return tuple(int(x) for x in re.findall(r"\d+", str(v or "")))


def driver_row(table, cuda_build):
    for row in table or []:
        if str(row.get("cuda")) == str(cuda_build):
            return row
    return None


def _gpu_label(g):
    return "GPU %s (%s, %s)" % (g.get("index"), g.get("name"), g.get("pci_bus_id"))


def preflight_report(facts, settings):
    """Run every preflight check on gpu_info facts; return a report dict.

    Each check: {'status': pass|fail|warn|skip, 'messages': [...]}; messages
    name the host, the GPU and the fix.
    """
    s = dict(settings or {})
    host = s.get("host", "this host")
    checks = {}
    notices = []

    def put(name, status, messages=None):
        checks[name] = {"status": status, "messages": list(messages or [])}

    gpus = facts.get("gpus") or []
    cuda_mode = facts.get("mode") == "cuda"

    # --- driver present
    expect_gpu = s.get("expect_gpu")
    if cuda_mode:
        put("driver_present", "pass")
    elif expect_gpu is True or (expect_gpu is None and facts.get("nvidia_smi_path")):
        why = facts.get("error") or "no NVIDIA GPU found"
        put("driver_present", "fail", [
            "%s: no usable NVIDIA driver (%s). Fix: install the NVIDIA driver (>= %s for CUDA %s builds) and "
            "load it (nvidia-smi must list the GPUs), or set gpu_preflight_expect_gpu: false for a CPU-only host."
            % (host, why, (driver_row(s.get("driver_table"), s.get("cuda_build")) or {}).get("min_driver", "?"),
               s.get("cuda_build"))])
    else:
        put("driver_present", "skip", ["%s: mode cpu (%s); GPU checks skipped." % (host, facts.get("error") or "no GPU")])

    # --- driver version vs the pinned CUDA build
    row = driver_row(s.get("driver_table"), s.get("cuda_build"))
    if not cuda_mode:
        put("driver_version", "skip")
    elif row is None:
        put("driver_version", "fail", ["%s: gpu_preflight_cuda_build '%s' is not in gpu_preflight_driver_table (%s). "
                                       "Fix: use one of those or add a row." % (
                                           host, s.get("cuda_build"),
                                           ", ".join(str(r.get("cuda")) for r in s.get("driver_table") or []))])
    else:
        drv = facts.get("driver_version")
        names = ", ".join(_gpu_label(g) for g in gpus)
        if version_tuple(drv) < version_tuple(row["min_driver"]):
            put("driver_version", "fail", [
                "%s: NVIDIA driver %s (CUDA %s) on %s is older than %s, the minimum for the CUDA %s build of %s. "
                "Fix: install driver >= %s (recommended >= %s), or pin a build for an older CUDA "
                "(gpu_preflight_cuda_build)." % (
                    host, drv, facts.get("cuda_driver_version"), names, row["min_driver"], row["cuda"],
                    s.get("build_label", "vLLM/torch"), row["min_driver"], row.get("recommended_driver", row["min_driver"]))])
        elif version_tuple(drv) < version_tuple(row.get("recommended_driver", row["min_driver"])):
            put("driver_version", "warn", [
                "%s: driver %s runs the CUDA %s build through minor-version compatibility only (no PTX JIT of newer "
                "PTX). Fix: upgrade to >= %s." % (host, drv, row["cuda"], row["recommended_driver"])])
        else:
            put("driver_version", "pass")

    # --- compute capability / FlashAttention
    archs = cuda_archs(gpus)
    fa_ok = bool(gpus) and all(g.get("flash_attn_arch") for g in gpus)
    if not cuda_mode:
        put("compute_capability", "skip")
    else:
        low = [g for g in gpus if not g.get("flash_attn_arch")]
        if low:
            put("compute_capability", "warn", [
                "%s: %s has compute capability %s; the FlashAttention build needs >= 8.0 (sm_80/90/100/120). "
                "The flash_attn role is skipped (llmops_flash_attn_supported=false); vLLM serving goes on with its "
                "own attention backends. Fix: use an Ampere or newer GPU for FlashAttention." % (
                    host, _gpu_label(g), g.get("compute_capability") or "unknown") for g in low])
        else:
            put("compute_capability", "pass")

    # --- total memory vs the model
    util = float(s.get("gpu_memory_utilization") or 0.92)
    w = s.get("weights")
    tp = int(s.get("tensor_parallel_size") or 1)
    reserve_mib = float(s.get("reserve_gib") or 0) * 1024
    if not cuda_mode:
        put("memory_total", "skip")
    elif not w:
        put("memory_total", "skip", ["%s: no model size known (gpu_preflight_model_config / gpu_preflight_model_params_b); "
                                     "memory check skipped." % host])
    else:
        need = w["bytes"] / tp / 1048576.0 + reserve_mib
        msgs = []
        for g in gpus:  # every GPU may host an instance (or a TP shard)
            total = (g.get("memory_total_mib") or 0) - (g.get("memory_reserved_mib") or 0)
            budget = total * util
            if need > budget:
                msgs.append(
                    "%s: %s has %d MiB usable x gpu_memory_utilization %.2f = %d MiB, but the model needs about %d MiB "
                    "(weights %.1f GiB = %.2fB params x %g bytes / tensor_parallel_size %d, + %.1f GiB reserve). "
                    "Fix: use a bigger GPU or more GPUs (tensor_parallel_size), a quantized model, or raise "
                    "gpu_memory_utilization." % (host, _gpu_label(g), total, util, budget, need,
                                                 w["bytes"] / 1073741824.0, w["params"] / 1e9, w["dtype_bytes"],
                                                 tp, reserve_mib / 1024))
        if tp > len(gpus):
            msgs.append("%s: tensor_parallel_size %d but only %d GPU(s). Fix: lower gpu_preflight_tensor_parallel_size."
                        % (host, tp, len(gpus)))
        put("memory_total", "fail" if msgs else "pass", msgs)

    # --- free memory (other processes)
    pats = [re.compile(p) for p in s.get("own_process_patterns") or []]
    if not cuda_mode:
        put("memory_free", "skip")
    else:
        msgs = []
        for g in gpus:
            total = (g.get("memory_total_mib") or 0) - (g.get("memory_reserved_mib") or 0)
            procs = g.get("processes") or []
            own = [p for p in procs if any(r.search(p.get("name") or "") for r in pats)]
            own_mib = sum(p.get("used_memory_mib") or 0 for p in own)
            free = (g.get("memory_free_mib") or 0) + own_mib
            allowed = (1.0 - util) * total
            held = total - free
            if free < util * total:
                others = [p for p in procs if p not in own]
                who = ", ".join("PID %s %s (%s MiB)" % (p.get("pid"), p.get("name"), p.get("used_memory_mib"))
                                for p in others) or "processes not visible to nvidia-smi (another container?)"
                msgs.append(
                    "%s: %s: other processes hold %d MiB, more than (1 - gpu_memory_utilization %.2f) x %d MiB = %d MiB, "
                    "so vLLM would fail with 'Free memory on device ... is less than desired GPU memory utilization'. "
                    "Held by: %s. Fix: stop them (or move them to another GPU), or lower gpu_memory_utilization to "
                    "<= %.2f." % (host, _gpu_label(g), held, util, total, allowed, who,
                                  max(0.0, int(100.0 * free / total) / 100.0) if total else 0))
        put("memory_free", "fail" if msgs else "pass", msgs)

    # --- ECC
    if not cuda_mode:
        put("ecc", "skip")
    else:
        msgs = ["%s: %s has %d volatile uncorrectable ECC error(s) since the last driver load. Fix: drain the GPU, "
                "reset it (nvidia-smi -r -i %s) or reboot, then check remapped rows (nvidia-smi -q -d ROW_REMAPPER); "
                "replace the GPU if errors return." % (host, _gpu_label(g), g["ecc_volatile_uncorrectable"], g.get("index"))
                for g in gpus if (g.get("ecc_volatile_uncorrectable") or 0) > 0]
        msgs += ["%s: %s has a row remapping pending. Fix: reset the GPU (nvidia-smi -r -i %s) or reboot."
                 % (host, _gpu_label(g), g.get("index")) for g in gpus if g.get("remapped_rows_pending")]
        put("ecc", "fail" if msgs else "pass", msgs)

    # --- persistence
    if not cuda_mode:
        put("persistence", "skip")
    else:
        msgs = ["%s: %s has persistence mode off: the driver unloads between processes (slow, flaky starts). "
                "Fix: enable nvidia-persistenced (or nvidia-smi -i %s -pm 1)." % (host, _gpu_label(g), g.get("index"))
                for g in gpus if g.get("persistence_enabled") is False]
        put("persistence", "warn" if msgs else "pass", msgs)

    # --- MIG
    expect_mig = s.get("expect_mig")
    if not cuda_mode or expect_mig is None:
        put("mig", "skip")
    else:
        msgs = []
        for g in gpus:
            cur = g.get("mig_enabled")
            if cur is None:
                if expect_mig:
                    msgs.append("%s: %s does not support MIG but gpu_preflight_expect_mig is true. Fix: set it to false "
                                "or null for this host." % (host, _gpu_label(g)))
                continue
            if bool(cur) != bool(expect_mig):
                msgs.append(
                    "%s: %s has MIG %s but the inventory expects it %s (gpu_preflight_expect_mig: %s). Fix: "
                    "nvidia-smi -i %s -mig %d and reset the GPU, or correct gpu_preflight_expect_mig."
                    % (host, _gpu_label(g), "enabled" if cur else "disabled", "enabled" if expect_mig else "disabled",
                       str(expect_mig).lower(), g.get("index"), 1 if expect_mig else 0))
            elif _flag(g.get("mig_mode_pending")) not in (None, cur):
                msgs.append("%s: %s has a MIG mode change pending. Fix: reset the GPU (nvidia-smi -r -i %s)."
                            % (host, _gpu_label(g), g.get("index")))
        put("mig", "fail" if msgs else "pass", msgs)

    # --- fabric manager (NVSwitch systems)
    if not cuda_mode:
        put("fabric", "skip")
    else:
        msgs = ["%s: %s fabric state is '%s' (status %s); NVSwitch GPUs cannot run CUDA work until the fabric is "
                "Completed. Fix: start nvidia-fabricmanager (same version as the driver)."
                % (host, _gpu_label(g), g["fabric"]["state"], g["fabric"].get("status"))
                for g in gpus if (g.get("fabric") or {}).get("state") not in (None, "Completed")]
        put("fabric", "fail" if msgs else ("pass" if facts.get("fabric", {}).get("present") else "skip"), msgs)

    # --- nvcc (hosts that build FlashAttention)
    if not s.get("require_nvcc"):
        put("nvcc", "skip")
    elif not facts.get("nvcc_version"):
        put("nvcc", "fail", ["%s: nvcc not found (PATH and /usr/local/cuda/bin), needed to build FlashAttention. "
                             "Fix: install the CUDA toolkit %s (cuda-toolkit-%s) or set gpu_preflight_require_nvcc: false."
                             % (host, s.get("cuda_build"), str(s.get("cuda_build")).replace(".", "-"))])
    else:
        msgs = []
        nv = facts["nvcc_version"]
        drv_cuda = facts.get("cuda_driver_version")
        if cuda_mode and drv_cuda and version_tuple(nv)[:2] > version_tuple(drv_cuda)[:2]:
            msgs.append("%s: nvcc is CUDA %s but driver %s supports CUDA <= %s; kernels it builds will not load. "
                        "Fix: install CUDA toolkit <= %s or upgrade the driver." % (host, nv, facts.get("driver_version"),
                                                                                    drv_cuda, drv_cuda))
        build = s.get("cuda_build")
        if build and version_tuple(nv)[:1] != version_tuple(build)[:1]:
            msgs.append("%s: nvcc is CUDA %s but torch/vLLM are built for CUDA %s; torch refuses to build extensions "
                        "across CUDA major versions. Fix: install CUDA toolkit %s.x (cuda-toolkit-%s)."
                        % (host, nv, build, version_tuple(build)[0], str(build).replace(".", "-")))
        put("nvcc", "fail" if msgs else "pass", msgs)

    # --- disk
    msgs = []
    for d in s.get("disk") or []:
        free = d.get("free_bytes")
        need = float(d.get("min_free_gib") or 0)
        if free is None:
            msgs.append("%s: cannot read free space for %s. Fix: create the path or its parent." % (host, d.get("path")))
        elif free / 1073741824.0 < need:
            msgs.append("%s: %s (on %s) has %.1f GiB free, needs %.1f GiB for %s. Fix: free space or point the path "
                        "at a bigger filesystem." % (host, d.get("path"), d.get("checked_path"), free / 1073741824.0,
                                                     need, d.get("purpose") or "this path"))
    put("disk", "fail" if msgs else ("pass" if s.get("disk") else "skip"), msgs)

    if cuda_mode and not fa_ok:
        notices.append("%s: FlashAttention not supported on every GPU; llmops_flash_attn_supported=false." % host)
    failed = sorted(k for k, v in checks.items() if v["status"] == "fail")
    warnings = [m for k in sorted(checks) if checks[k]["status"] == "warn" for m in checks[k]["messages"]]
    return {
        "checks": checks,
        "failed": failed,
        "failures": [m for k in failed for m in checks[k]["messages"]],
        "warnings": warnings,
        "notices": notices,
        "flash_attn_supported": bool(cuda_mode and fa_ok),
        "cuda_archs": archs if cuda_mode else [],
        "weights": w,
    }
