"""vllm_metrics on the REAL CUDA vLLM 0.25.1 captures of the H200 machine
(tests/fixtures/vllm-cuda-0.25.1/, see its README): GPU startup-log format,
block size 16, the FLASH_ATTN / FlashAttention 3 lines, cache_config_info labels."""
import json
import os

from ansible_collections.llmops.serving.plugins.module_utils import vllm_metrics as vm

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "vllm-cuda-0.25.1")


def read(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def test_gpu_startup_log_kv_line():
    engines = vm.parse_startup_log(read("startup.log"))
    assert engines == [{"engine": "0", "model_name": "tiny", "device": "GPU",
                        "capacity": {"kv_cache_size_tokens": 65718304, "kv_cache_max_concurrency": 32089.02,
                                     "max_tokens_per_request": 2048},
                        "usage": {}, "usage_metric": None}]


def test_gpu_startup_facts_backend_and_memory():
    facts = vm.parse_startup_facts(read("startup.log"))
    assert facts == {
        "vllm_version": "0.25.1", "attention_backend": "FLASH_ATTN", "flash_attn_version": 3,
        "model_loading_gib": 0.04, "model_loading_s": 1.925566, "torch_compile_s": 12.96,
        "available_kv_cache_gib": 125.35, "kv_cache_size_tokens": 65718304, "device": "GPU",
        "graph_capture_s": 2.0, "graph_capture_gib": 0.15, "init_engine_s": 35.28}


def test_kv_tokens_follow_from_kv_memory_fp8():
    # fp8 KV: 2 (K, V) x 4 layers x 4 KV heads x head_dim 64 x 1 byte = 2048 bytes a token.
    cfg = json.loads(read("tinyllama_config.json"))
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 1
    facts = vm.parse_startup_facts(read("startup.log"))
    predicted = facts["available_kv_cache_gib"] * 2 ** 30 / per_token
    assert abs(predicted - facts["kv_cache_size_tokens"]) / facts["kv_cache_size_tokens"] < 0.001


def test_cuda_metrics_cache_config_info_labels():
    engines = vm.parse_metrics(vm.strip_http_headers(read("metrics.http")))
    assert len(engines) == 1
    e = engines[0]
    assert (e["engine"], e["model_name"]) == ("0", "tiny")
    assert e["capacity"] == {"kv_cache_size_tokens": 65718304, "num_gpu_blocks": 4107394, "block_size": 16,
                             "cache_dtype": "fp8", "kv_cache_max_concurrency": 32089.015625,
                             "gpu_memory_utilization": 0.9, "enable_prefix_caching": True,
                             "calculate_kv_scales": False}
    assert e["capacity"]["num_gpu_blocks"] * e["capacity"]["block_size"] == e["capacity"]["kv_cache_size_tokens"]
    assert e["usage_metric"] == "vllm:kv_cache_usage_perc"


def test_cuda_metrics_after_requests_count_tokens():
    e = vm.parse_metrics(read("metrics_after.txt"))[0]
    assert e["usage"]["num_requests_running"] == 0
    assert e["usage"]["prompt_tokens"] > 0 and e["usage"]["generation_tokens"] > 0


def test_log_and_metrics_agree():
    log = vm.parse_startup_log(read("startup.log"))[0]["capacity"]
    met = vm.parse_metrics(vm.strip_http_headers(read("metrics.http")))[0]["capacity"]
    assert log["kv_cache_size_tokens"] == met["kv_cache_size_tokens"]
    assert round(met["kv_cache_max_concurrency"], 2) == log["kv_cache_max_concurrency"]


def test_version_and_models_captures():
    assert json.loads(vm.strip_http_headers(read("version.http"))) == {"version": "0.25.1"}
    models = json.loads(vm.strip_http_headers(read("v1_models.http")))["data"]
    assert [(m["id"], m["max_model_len"], m["root"]) for m in models] == [("tiny", 2048, "/tmp/tinyllama")]
    assert read("health.http").startswith("HTTP/1.1 200")


def test_args_check_on_the_cuda_parser():
    good = json.loads(read("args_check_good.json"))
    assert good["rc"] == 0 and good["result"]["parser_checked"] is True
    assert good["result"]["vllm_version"] == "0.25.1" and good["result"]["problems"] == []
    bad = json.loads(read("args_check_bad.json"))["result"]
    by_path = {}
    for p in bad["problems"]:
        by_path.setdefault(p["path"], []).append(p)
    assert "attention_backend" in by_path["vllm_instances[0].args.enable_flash_attn"][0]["msg"]
    assert by_path["vllm_instances[1].args.gpu_memory_utilization"][0]["kind"] == "range"
    assert any(p["kind"] == "parser" for p in by_path["vllm_instances[2].args.kv_cache_dtype"])
