# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parsers for the text the NVIDIA tools print (pure Python, no Ansible imports).

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
_NA = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", "none")
_UNIT_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:MiB|W|C|%|MHz|KB/s|us|bank\(s\))?\s*$")


def clean(value):
    if value is None:
        return None
    value = value.strip()
    if value.lower() in _NA:
        return None
    return value


def num(value, cast=float):
    """'143771 MiB' -> 143771, '79.89 W' -> 79.89, 'N/A' -> None."""
    value = clean(value)
    if value is None:
        return None
    m = _UNIT_RE.match(value)
    if not m:
        return None
    try:
        return cast(float(m.group(1))) if cast is int else cast(m.group(1))
    except ValueError:
        return None


def flag(value):
    """Enabled/Disabled/On/Off -> True/False, else None."""
    value = clean(value)
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
            "index": num(r.get("index"), int),
            "name": clean(r.get("name")),
            "uuid": clean(r.get("uuid")),
            "pci_bus_id": normalize_bus_id(clean(r.get("pci.bus_id"))),
            "driver_version": clean(r.get("driver_version")),
            "memory_total_mib": num(r.get("memory.total"), int),
            "memory_used_mib": num(r.get("memory.used"), int),
            "memory_free_mib": num(r.get("memory.free"), int),
            "compute_capability": clean(r.get("compute_cap")),
            "temperature_c": num(r.get("temperature.gpu"), int),
            "power_draw_w": num(r.get("power.draw")),
            "utilization_gpu_pct": num(r.get("utilization.gpu"), int),
            "persistence_mode": clean(r.get("persistence_mode")),
            "mig_mode_current": clean(r.get("mig.mode.current")),
            "ecc_mode_current": clean(r.get("ecc.mode.current")),
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
        "driver_version": clean(_text(root, "driver_version")),
        "cuda_driver_version": clean(_text(root, "cuda_version")),
        "attached_gpus": num(_text(root, "attached_gpus"), int),
    }
    gpus = []
    for g in root.findall("gpu"):
        vol = g.find("ecc_errors/volatile")
        if vol is not None:
            # v13 DTD: sram_uncorrectable_parity/_secded + dram_uncorrectable;
            # older: sram_uncorrectable + dram_uncorrectable; oldest: double_bit/total.
            unc = _sum_ints(num(c.text, int) for c in vol if "uncorrectable" in c.tag)
            cor = _sum_ints(num(c.text, int) for c in vol if c.tag.endswith("correctable") and "uncorrectable" not in c.tag)
            if unc is None:
                unc = num(_text(vol, "double_bit/total"), int)
            if cor is None:
                cor = num(_text(vol, "single_bit/total"), int)
        else:
            unc = cor = None
        procs = []
        for p in g.findall("processes/process_info"):
            procs.append({
                "pid": num(_text(p, "pid"), int),
                "type": clean(_text(p, "type")),
                "name": clean(_text(p, "process_name")),
                "used_memory_mib": num(_text(p, "used_memory"), int),
                "gpu_instance_id": num(_text(p, "gpu_instance_id"), int),
                "compute_instance_id": num(_text(p, "compute_instance_id"), int),
            })
        migs = []
        for m in g.findall("mig_devices/mig_device"):
            migs.append({
                "index": num(_text(m, "index"), int),
                "gpu_instance_id": num(_text(m, "gpu_instance_id"), int),
                "compute_instance_id": num(_text(m, "compute_instance_id"), int),
                "memory_total_mib": num(_text(m, "fb_memory_usage/total"), int),
                "memory_used_mib": num(_text(m, "fb_memory_usage/used"), int),
                "multiprocessor_count": num(_text(m, "device_attributes/shared/multiprocessor_count"), int),
            })
        fabric = g.find("fabric")
        gpus.append({
            "pci_bus_id": normalize_bus_id(g.get("id")),
            "name": clean(_text(g, "product_name")),
            "architecture": clean(_text(g, "product_architecture")),
            "uuid": clean(_text(g, "uuid")),
            "minor_number": num(_text(g, "minor_number"), int),
            "persistence_mode": clean(_text(g, "persistence_mode")),
            "mig_mode_current": clean(_text(g, "mig_mode/current_mig")),
            "mig_mode_pending": clean(_text(g, "mig_mode/pending_mig")),
            "mig_devices": migs,
            "ecc_mode_current": clean(_text(g, "ecc_mode/current_ecc")),
            "ecc_mode_pending": clean(_text(g, "ecc_mode/pending_ecc")),
            "ecc_volatile_uncorrectable": unc,
            "ecc_volatile_correctable": cor,
            "remapped_rows_pending": flag(_text(g, "remapped_rows/remapped_row_pending")),
            "remapped_rows_failure": flag(_text(g, "remapped_rows/remapped_row_failure")),
            "memory_total_mib": num(_text(g, "fb_memory_usage/total"), int),
            "memory_reserved_mib": num(_text(g, "fb_memory_usage/reserved"), int),
            "memory_used_mib": num(_text(g, "fb_memory_usage/used"), int),
            "memory_free_mib": num(_text(g, "fb_memory_usage/free"), int),
            "compute_mode": clean(_text(g, "compute_mode")),
            "temperature_c": num(_text(g, "temperature/gpu_temp"), int),
            "power_draw_w": num(_text(g, "gpu_power_readings/instant_power_draw"))
            or num(_text(g, "gpu_power_readings/power_draw"))
            or num(_text(g, "power_readings/power_draw")),
            "power_limit_w": num(_text(g, "gpu_power_readings/current_power_limit"))
            or num(_text(g, "power_readings/power_limit")),
            "processes": procs,
            "fabric": {
                "state": clean(_text(fabric, "state")),
                "status": clean(_text(fabric, "status")),
                "clique_id": clean(_text(fabric, "cliqueId")),
                "cluster_uuid": clean(_text(fabric, "clusterUuid")),
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
