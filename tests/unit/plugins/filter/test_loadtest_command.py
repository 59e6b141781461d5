# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""loadtest_command builds the same argv, byte for byte, as the verify role's
Jinja did before it moved into Python: tests/fixtures/verify-argv/old-jinja-argv.json
holds that Jinja's output (the 'Build the load-generator command' set_fact of
roles/verify/tasks/run.yml at 74ec1b9, run once by ansible-playbook 2.19 on
these inputs: the role's defaults, the molecule and live-test settings, the
anthropic wrapper, line_by_line with and without a tokenizer, a clamped prompt
length)."""
import json
import os

import pytest

from conftest import FIXTURES
from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.filter.loadtest import loadtest_command
from ansible_collections.llmops.serving.plugins.module_utils.loadtest import prompt_length_bounds

with open(os.path.join(FIXTURES, "verify-argv", "old-jinja-argv.json")) as fh:
    OLD = json.load(fh)


def settings(v):
    """The role's variables as run.yml passes them to the filter."""
    return {
        "tool": v["_verify_plan"]["tool"], "plan": v["_verify_plan"], "python": v["_verify_python"],
        "work_dir": v["verify_work_dir"], "vllm_venv": v["verify_vllm_venv"], "vllm_dist_rc": v["_verify_vllm_dist"]["rc"],
        "base_url": v["verify_base_url"], "model": v["verify_model"], "concurrency": v["verify_concurrency"],
        "requests": v["_verify_requests_list"], "remote_dir": v["_verify_remote_dir"],
        "request_timeout": v["verify_request_timeout"], "connect_timeout": v["verify_connect_timeout"],
        "sleep_interval": v["verify_evalscope_sleep_interval"], "seed": v["verify_seed"], "stream": v["verify_stream"],
        "output_len": v["verify_output_len"], "input_len": v["verify_input_len"],
        "input_len_range_ratio": v["verify_input_len_range_ratio"], "dataset": v["verify_dataset"],
        "tokenizer_path": v["verify_tokenizer_path"], "prompts_file": v["verify_prompts_file"],
        "extra_args": v["verify_extra_args"],
    }


@pytest.mark.parametrize("case", sorted(OLD))
def test_argv_is_byte_identical_to_the_old_jinja(case):
    assert json.dumps(loadtest_command(settings(OLD[case]["vars"]))) == json.dumps(OLD[case]["argv"])


def test_the_captures_cover_both_tools_both_datasets_and_the_wrapper():
    argvs = [c["argv"] for c in OLD.values()]
    assert any("bench" in a and "serve" in a for a in argvs)
    assert any(a[1].endswith("/vllm_bench_serve.py") for a in argvs)
    assert any(a[1].endswith("/evalscope_perf.py") and "line_by_line" in a for a in argvs)
    assert any("custom" in a for a in argvs)


def test_prompt_length_bounds():
    assert prompt_length_bounds(32, 0.5) == (16, 48)
    assert prompt_length_bounds(5, 0.9) == (1, 10)
    assert prompt_length_bounds("100", 0.0) == (100, 100)


def test_missing_settings_are_named():
    s = settings(OLD["evalscope-defaults"]["vars"])
    del s["seed"], s["stream"]
    with pytest.raises(AnsibleFilterError, match="missing settings seed, stream"):
        loadtest_command(s)


def test_unknown_tool():
    with pytest.raises(AnsibleFilterError, match="verify_tool must be evalscope or vllm_bench"):
        loadtest_command({"tool": "locust"})
