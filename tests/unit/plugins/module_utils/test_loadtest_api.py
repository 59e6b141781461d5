# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""loadtest/api.py: which API a load test drives and how each load generator drives it."""
import os
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import loadtest as lt

from conftest import ROOT


def test_openai_is_the_default_api_with_the_tools_own_request_functions():
    assert lt.load_plan("openai", "vllm_bench") == dict(
        api="openai", tool="vllm_bench", endpoint="/v1/completions", backend="vllm", ignore_eos=True, wrapper=False)
    assert lt.load_plan("openai", "vllm_bench", "/v1/chat/completions")["backend"] == "openai-chat"
    assert lt.load_plan("openai", "evalscope", "")["backend"] == "openai"
    assert lt.load_plan("openai", "evalscope", "/v1/completions", ignore_eos=False)["ignore_eos"] is False


def test_anthropic_runs_vllm_bench_with_the_wrappers_request_function_and_no_forced_length():
    assert lt.load_plan("anthropic", "vllm_bench", "", ignore_eos=True) == dict(
        api="anthropic", tool="vllm_bench", endpoint="/v1/messages", backend="anthropic-messages",
        ignore_eos=False, wrapper=True)


@pytest.mark.parametrize("api, tool, endpoint, message", [
    ("anthropic", "evalscope", "", "verify_tool=evalscope cannot drive the anthropic API (/v1/messages): "
                                   "use verify_tool=vllm_bench (EvalScope 1.14.1 has no Anthropic API"),
    ("anthropic", "vllm_bench", "/v1/completions", "verify_endpoint /v1/completions is not a path of the "
                                                   "anthropic API: use /v1/messages"),
    ("openai", "vllm_bench", "/v1/messages", "verify_endpoint /v1/messages is not a path of the openai API: "
                                             "use /v1/chat/completions or /v1/completions"),
    ("claude", "vllm_bench", "", "verify_api must be one of anthropic, openai, got 'claude'"),
    ("openai", "locust", "", "verify_tool must be evalscope or vllm_bench, got 'locust'"),
])
def test_what_cannot_run_names_the_variable(api, tool, endpoint, message):
    with pytest.raises(lt.LoadTestError, match="^" + re.escape(message)):
        lt.load_plan(api, tool, endpoint)


def test_the_wrapper_registers_every_request_function_the_plans_name():
    """The backends a plan marks as the wrapper's are the ones roles/verify/files/vllm_bench_serve.py registers."""
    with open(os.path.join(ROOT, "roles", "verify", "files", "vllm_bench_serve.py"), encoding="utf-8") as f:
        text = f.read()
    wrapper = {p["backend"] for api, paths in lt.APIS.items() for path in paths
               for tool in paths[path] for p in [lt.load_plan(api, tool, path)] if p["wrapper"]}
    assert wrapper == {"anthropic-messages"}
    assert 'ANTHROPIC_BACKEND = "anthropic-messages"' in text and 'ENDPOINT = "/v1/messages"' in text
