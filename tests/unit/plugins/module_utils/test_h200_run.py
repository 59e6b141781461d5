"""Checks on the REAL outputs of this repo's own H200 run (2026-11-30).

The gpu_info facts came out of two back ends (NVML and nvidia-smi) on the same
machine; the flash-attn wheel was built there by the role's build script.
"""
import json
import os

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "..", "..", "..", "fixtures")
RUN = os.path.join(FIX, "nvidia-smi", "h200-run-2026-11-30")


def _read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def test_real_query_csv_parses_to_one_h200():
    gpus = smi.parse_query_csv(_read(RUN, "query-gpu.csv"))
    assert len(gpus) == 1
    g = gpus[0]
    assert g["name"] == "NVIDIA H200"
    assert g["memory_total_mib"] == 143771
    assert g["compute_capability"] == "9.0"


def test_nvml_and_nvidia_smi_back_ends_agree_on_the_real_machine():
    nvml = json.loads(_read(RUN, "gpu_info-nvml.json"))
    smi = json.loads(_read(RUN, "gpu_info-smi.json"))
    assert nvml["mode"] == smi["mode"] == "cuda"
    assert nvml["driver_version"] == smi["driver_version"] == "580.159.04"
    assert nvml["gpu_count"] == smi["gpu_count"] == 1
    assert nvml["cuda_archs"] == smi["cuda_archs"] == ["90"]
    for key in ("uuid", "pci_bus_id", "name", "memory_total_mib", "compute_capability",
                "ecc_volatile_uncorrectable", "mig_enabled", "persistence_enabled"):
        assert nvml["gpus"][0][key] == smi["gpus"][0][key], key


def test_real_cuobjdump_lists_72_sm90_cubins():
    cubins = fa.parse_list_elf(_read(FIX, "flash_attn", "cuobjdump-list-elf-sm90-h200.txt"))
    counts = cubins if isinstance(cubins, dict) and "90" in cubins else None
    if counts is None:
        counts = {}
        for item in cubins:
            counts[str(item)] = counts.get(str(item), 0) + 1
    assert counts.get("90") == 72


def test_recorded_build_verification():
    v = json.loads(_read(FIX, "flash_attn", "h200-verify-2026-11-30.json"))
    assert v["ok"] is True and v["missing_archs"] == []
    assert v["cubins"] == {"90": 72}
    assert v["numeric_max_rel_error"] < 1e-2
