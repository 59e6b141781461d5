# -*- coding: utf-8 -*-
"""Run the real vllm_kv_predict module (through ansible) on model folders written here."""
import json
import os

import pytest

from conftest import ROOT, run_module_check

FIX = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "h200-run-2026-11-30")

TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048, "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16"}


def run_module(args):
    res = run_module_check("vllm_kv_predict", args)
    assert not res.get("failed"), res
    assert res["changed"] is False
    return res


def test_cpu_exact_and_safetensors_size(tmp_path):
    m = tmp_path / "tiny"
    m.mkdir()
    (m / "config.json").write_text(json.dumps(TINY))
    (m / "model.safetensors").write_bytes(b"\0" * 12345)
    res = run_module({"instances": [{"name": "default", "model": str(m), "max_model_len": 512},
                                    {"name": "absent", "model": str(tmp_path / "nope")}],
                      "cpu_kvcache_space_gib": 1})
    a, b = res["instances"]
    assert res["device"] == "cpu"
    assert a["weights"] == {"bytes": 12345, "source": "safetensors", "files": 1}
    assert (a["kv"]["tokens"], a["kv"]["blocks"], a["kv"]["max_concurrency"]) == (2097152, 16384, 4096.0)
    assert b["kv"] is None and "no config.json" in b["kv_skipped"]


def test_gpu_on_the_real_h200_facts(tmp_path):
    with open(os.path.join(FIX, "gpu_info-nvml.json")) as f:
        gpus = json.load(f)["gpus"]  # what gpu_info returned on the real H200
    m = tmp_path / "tiny"
    m.mkdir()
    (m / "config.json").write_text(json.dumps(TINY))
    res = run_module({"instances": [{"name": "a", "model": str(m), "gpus": [0], "gpu_memory_utilization": 0.5,
                                     "max_model_len": 1024, "args": {"kv_cache_dtype": "fp8"}},
                                    {"name": "tp2", "model": str(m), "tensor_parallel_size": 2}],
                      "gpus": gpus})
    a, tp2 = res["instances"]
    assert res["device"] == "cuda" and a["gpus_used"] == [0] and a["gpu_total_mib"] == 143771
    assert a["kv"]["bytes_per_token"] == 256 and a["kv"]["block_size"] == 16 and not a["kv"]["exact"]
    assert a["weights"]["source"] == "config.json"
    assert tp2["kv"] is None and "placement" in tp2["kv_skipped"]


def test_docs_parse_and_match_the_argument_spec():
    import yaml
    from ansible_collections.llmops.serving.plugins.modules import vllm_kv_predict as mod
    doc = yaml.safe_load(mod.DOCUMENTATION)
    yaml.safe_load(mod.EXAMPLES)
    assert yaml.safe_load(mod.RETURN)["instances"]["contains"]["kv"]
    seen = {}

    class Fake(object):
        def __init__(self, argument_spec, **kw):
            seen.update(argument_spec)
            raise RuntimeError("captured")
    orig, mod.AnsibleModule = mod.AnsibleModule, Fake
    try:
        with pytest.raises(RuntimeError):
            mod.main()
    finally:
        mod.AnsibleModule = orig
    assert set(doc["options"]) == set(seen)
    for k, d in doc["options"].items():
        assert d.get("type", "str") == seen[k].get("type", "str") and d.get("default") == seen[k].get("default"), k
