# -*- coding: utf-8 -*-
"""gpu module_utils on the real H200 capture and the made ones (tests/fixtures/nvidia-smi)."""
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.gpu import checks
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia-smi")

TABLE = [
    {"cuda": "12.9", "min_driver": "525.60.13", "recommended_driver": "575.51.03"},
    {"cuda": "13.0", "min_driver": "580.65.06", "recommended_driver": "580.65.06"},
]
LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def read(*p):
    with open(os.path.join(FIX, *p)) as f:
        return f.read()


def facts(case, nvcc=None):
    return gpu_facts.facts_from_smi(read(case, "query-gpu.csv"), read(case, "nvidia-smi-q.xml"),
                                    read(*nvcc) if nvcc else None, "/usr/bin/nvidia-smi")


def inst(name="default", gpus=None, tp=1, pp=1, util=0.92, w="8b", kv=None, model="/srv/models/m"):
    """An instance view entry as vllm_kv_predict returns it (weights + kv)."""
    return {"name": name, "model": model, "gpus": gpus, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
            "gpu_memory_utilization": util, "max_model_len": None, "args": {},
            "weights": weights.estimate_weights(LLAMA3_8B) if w == "8b" else w, "kv": kv}


def settings(weights_=None, gpu_memory_utilization=0.92, tensor_parallel_size=1, instances=None, **kw):
    s = {"host": "gpu01", "cuda_build": "13.0", "driver_table": TABLE, "expect_gpu": None,
         "reserve_gib": 2, "expect_mig": None,
         "require_nvcc": False, "own_process_patterns": ["^VLLM::", "/opt/vllm/venv/"], "disk": [],
         "instances": instances if instances is not None else
         [inst(util=gpu_memory_utilization, tp=tensor_parallel_size, w=weights_ or "8b")]}
    s.update(kw)
    return s


# ---------------------------------------------------------------- parsers, real capture
def test_real_csv_with_header_and_units_equals_nounits_form():
    a = smi.parse_query_csv(read("h200", "query-gpu-csv-header-units.csv"))
    b = smi.parse_query_csv(read("h200", "query-gpu.csv"))
    assert a == b
    g = a[0]
    assert g["index"] == 0 and g["name"] == "NVIDIA H200"
    assert g["memory_total_mib"] == 143771 and g["memory_free_mib"] == 143156 and g["memory_used_mib"] == 0
    assert g["compute_capability"] == "9.0" and g["power_draw_w"] == 79.89
    assert g["persistence_mode"] == "Enabled" and g["mig_mode_current"] == "Disabled"


def test_real_probe_header_lists_query_fields():
    header = read("h200", "query-gpu-csv-header-units.csv").splitlines()[0]
    names = [c.strip().split(" [")[0] for c in header.split(",")]
    assert tuple(names) == smi.QUERY_FIELDS


def test_real_xml():
    host, gpus = smi.parse_nvsmi_xml(read("h200", "nvidia-smi-q.xml"))
    assert host == {"driver_version": "580.159.04", "cuda_driver_version": "13.0", "attached_gpus": 1}
    g = gpus[0]
    assert g["pci_bus_id"] == "00000000:00:06.0"
    assert g["memory_reserved_mib"] == 616 and g["memory_total_mib"] == 143771
    assert g["ecc_volatile_uncorrectable"] == 0 and g["ecc_volatile_correctable"] == 0
    assert g["processes"] == [] and g["mig_devices"] == []
    assert g["fabric"]["state"] is None
    assert g["power_limit_w"] == 700.0 and g["temperature_c"] == 35


def test_real_nvcc():
    assert smi.parse_nvcc_version(read("h200", "nvcc-version.txt")) == {"version": "13.0", "build": "13.0.88"}
    assert smi.parse_nvcc_version("bash: nvcc: command not found") is None


def test_real_h200_facts():
    f = facts("h200", ("h200", "nvcc-version.txt"))
    assert f["mode"] == "cuda" and f["gpu_count"] == 1
    assert f["driver_version"] == "580.159.04" and f["cuda_driver_version"] == "13.0"
    assert f["nvcc_version"] == "13.0" and f["cuda_archs"] == ["90"]
    g = f["gpus"][0]
    assert g["compute_capability_major"] == 9 and g["flash_attn_arch"] == "90"
    assert g["persistence_enabled"] is True and g["mig_enabled"] is False and g["ecc_enabled"] is True
    assert g["uuid"] == "GPU-20898373-834c-d860-3967-c23b84540f61"
    json.dumps(f)  # facts must be JSON


def test_real_h200_passes_every_check():
    r = checks.preflight_report(facts("h200", ("h200", "nvcc-version.txt")), settings(require_nvcc=True, expect_mig=False))
    assert r["failed"] == [], r["failures"]
    assert r["warnings"] == []
    assert r["flash_attn_supported"] is True and r["cuda_archs"] == ["90"]
    assert r["checks"]["nvcc"]["status"] == "pass" and r["checks"]["mig"]["status"] == "pass"


# ---------------------------------------------------------------- made captures
def test_a100_persistence_off_warns_only():
    r = checks.preflight_report(facts("a100-80gb"), settings())
    assert r["failed"] == []
    assert r["checks"]["persistence"]["status"] == "warn"
    assert "GPU 0 (NVIDIA A100-SXM4-80GB" in r["warnings"][0] and "nvidia-smi -i 0 -pm 1" in r["warnings"][0]
    assert r["cuda_archs"] == ["80"]


def test_mig_enabled_against_inventory():
    f = facts("mig-enabled")
    assert f["gpus"][0]["mig_enabled"] is True and len(f["gpus"][0]["mig_devices"]) == 2
    assert f["gpus"][0]["mig_devices"][0]["memory_total_mib"] == 40192
    r = checks.preflight_report(f, settings(expect_mig=False))
    assert r["failed"] == ["mig"]
    assert "NVIDIA A100-SXM4-80GB" in r["failures"][0] and "nvidia-smi -i 0 -mig 0" in r["failures"][0]
    assert checks.preflight_report(f, settings(expect_mig=True))["failed"] == []
    assert checks.preflight_report(f, settings(expect_mig=None))["checks"]["mig"]["status"] == "skip"


def test_ecc_uncorrectable_fails():
    f = facts("ecc-uncorrectable")
    assert f["gpus"][0]["ecc_volatile_uncorrectable"] == 2
    r = checks.preflight_report(f, settings())
    assert r["failed"] == ["ecc"]
    assert "2 volatile uncorrectable" in r["failures"][0] and "nvidia-smi -r -i 0" in r["failures"][0]


def test_foreign_process_named():
    f = facts("foreign-process")
    assert f["gpus"][0]["processes"][0] == {"pid": 4242, "type": "C", "name": "/usr/bin/python3",
                                            "used_memory_mib": 40960, "gpu_instance_id": None,
                                            "compute_instance_id": None}
    r = checks.preflight_report(f, settings())
    assert r["failed"] == ["memory_free"]
    msg = r["failures"][0]
    assert "PID 4242 /usr/bin/python3 (40960 MiB)" in msg and "NVIDIA H200" in msg and "Fix:" in msg
    # a lower utilization fits next to it: (1 - 0.6) x 143155 > 40962
    assert checks.preflight_report(f, settings(gpu_memory_utilization=0.6))["failed"] == []


def test_own_vllm_process_is_not_foreign():
    f = facts("foreign-process")
    f["gpus"][0]["processes"][0]["name"] = "VLLM::EngineCore"
    assert checks.preflight_report(f, settings())["failed"] == []


def test_driver_too_old():
    r = checks.preflight_report(facts("driver-too-old"), settings())
    assert r["failed"] == ["driver_version"]
    assert "515.105.01" in r["failures"][0] and ">= 580.65.06" in r["failures"][0]
    assert "NVIDIA A100-SXM4-80GB" in r["failures"][0]
    assert checks.preflight_report(facts("driver-too-old"), settings(cuda_build="12.9"))["failed"] == ["driver_version"]


def test_minor_version_compat_warns():
    f = facts("a100-80gb")
    f["driver_version"] = "570.172.08"
    r = checks.preflight_report(f, settings(cuda_build="12.9"))
    assert r["checks"]["driver_version"]["status"] == "warn"


def test_mixed_archs_union():
    f = facts("mixed")
    assert [g["name"] for g in f["gpus"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe"]
    assert f["cuda_archs"] == ["80", "90"]
    r = checks.preflight_report(f, settings())
    assert r["failed"] == [] and r["flash_attn_supported"] is True and r["cuda_archs"] == ["80", "90"]


def test_t4_no_flash_attn_but_serving_goes_on():
    f = facts("t4")
    assert f["gpus"][0]["mig_mode_current"] is None and f["gpus"][0]["flash_attn_arch"] is None
    r = checks.preflight_report(f, settings(weights_=weights.estimate_weights(params_b=0.5)))
    assert r["failed"] == [] and r["flash_attn_supported"] is False and r["cuda_archs"] == []
    assert r["checks"]["compute_capability"]["status"] == "warn"
    assert "Tesla T4" in r["warnings"][0] and "7.5" in r["warnings"][0]


def test_t4_too_small_for_8b():
    r = checks.preflight_report(facts("t4"), settings())
    assert r["failed"] == ["memory_total"]
    assert "Tesla T4" in r["failures"][0] and "tensor_parallel_size" in r["failures"][0]


def test_no_driver_output_and_cpu_mode():
    assert smi.is_no_driver_output(read("no-driver", "stdout.txt"))
    f = gpu_facts.cpu_facts("nvidia-smi failed (rc=9)", "/usr/bin/nvidia-smi")
    r = checks.preflight_report(f, settings())
    assert r["failed"] == ["driver_present"] and "gpu01" in r["failures"][0]
    assert checks.preflight_report(f, settings(expect_gpu=False))["failed"] == []
    cpu = gpu_facts.cpu_facts("no NVIDIA driver: nvidia-smi not found")
    r = checks.preflight_report(cpu, settings())
    assert r["failed"] == [] and r["flash_attn_supported"] is False and r["cuda_archs"] == []
    assert checks.preflight_report(cpu, settings(expect_gpu=True))["failed"] == ["driver_present"]


def test_nvcc_checks():
    f = facts("h200", ("nvcc", "nvcc-13.1.txt"))
    r = checks.preflight_report(f, settings(require_nvcc=True))
    assert r["failed"] == ["nvcc"] and "supports CUDA <= 13.0" in r["failures"][0]
    f = facts("h200", ("nvcc", "nvcc-12.9.txt"))
    r = checks.preflight_report(f, settings(require_nvcc=True))
    assert r["failed"] == ["nvcc"] and "across CUDA major versions" in r["failures"][0]
    r = checks.preflight_report(facts("h200"), settings(require_nvcc=True))
    assert r["failed"] == ["nvcc"] and "nvcc not found" in r["failures"][0]


def test_fabric_not_started_fails():
    f = facts("h200")
    f["gpus"][0]["fabric"]["state"] = "In Progress"
    r = checks.preflight_report(f, settings())
    assert r["failed"] == ["fabric"] and "nvidia-fabricmanager" in r["failures"][0]


def test_disk():
    r = checks.preflight_report(facts("h200"), settings(disk=[
        {"path": "/opt/vllm", "checked_path": "/opt", "free_bytes": 5 * 2 ** 30, "min_free_gib": 20, "purpose": "venv"}]))
    assert r["failed"] == ["disk"] and "5.0 GiB free, needs 20.0 GiB for venv" in r["failures"][0]


# ---------------------------------------------------------------- weights estimate
def test_llama3_8b_params():
    # Meta-Llama-3-8B has 8,030,261,248 parameters
    assert weights.estimate_params(LLAMA3_8B) == 8030261248
    w = weights.estimate_weights(LLAMA3_8B)
    assert w["bytes"] == 2 * 8030261248 and w["dtype_bytes"] == 2.0


def test_qwen2_7b_tied_and_quantized():
    qwen25_7b = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                 "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}
    n = weights.estimate_params(qwen25_7b)
    assert 7.5e9 < n < 7.7e9  # 7.62B published, biases ignored
    assert weights.dtype_bytes_of({"quantization_config": {"bits": 4, "quant_method": "awq"}}) == 0.5
    assert weights.dtype_bytes_of({"quantization_config": {"quant_method": "fp8"}}) == 1.0


def test_params_override_wins():
    assert weights.estimate_weights(LLAMA3_8B, params_b=70)["params"] == 70 * 10 ** 9
    assert weights.estimate_weights(None, params_b=7, dtype_bytes=1)["bytes"] == 7 * 10 ** 9
    assert weights.estimate_weights(None) is None


def test_archs_mapping():
    assert [gpu_facts.flash_attn_arch(c) for c in ("8.0", "8.6", "8.9", "9.0", "10.0", "12.0", "7.5", "11.0", None)] == \
        ["80", "80", "80", "90", "100", "120", None, None, None]


def test_bad_csv_raises():
    with pytest.raises(ValueError):
        smi.parse_query_csv("0, NVIDIA H200, 9.0")
