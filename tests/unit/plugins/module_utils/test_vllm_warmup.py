"""Pure parts of the warmup engine (planning, percentiles, CLI). Requests
against a real server: tests/integration/test_vllm_live.py."""
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_warmup as vw

SRC = vw.__file__


def test_list_is_cycled():
    assert vw.plan_prompt_lengths(5, [16, 64]) == [16, 64, 16, 64, 16]


def test_histogram_proportions_and_interleaving():
    plan = vw.plan_prompt_lengths(8, histogram={16: 3, 256: 1})
    assert sorted(plan) == [16] * 6 + [256] * 2
    assert plan[:4].count(256) == 1  # a prefix already has the mix
    plan = vw.plan_prompt_lengths(10, histogram={10: 1, 20: 1, 30: 1})
    assert sorted(set(plan)) == [10, 20, 30] and len(plan) == 10
    assert max(plan.count(x) for x in (10, 20, 30)) - min(plan.count(x) for x in (10, 20, 30)) <= 1


@pytest.mark.parametrize("kwargs", [dict(count=0, prompt_lens=[1]), dict(count=2, prompt_lens=[]),
                                    dict(count=2, prompt_lens=[0]), dict(count=2, histogram={16: 0}),
                                    dict(count=2, histogram={-1: 1})])
def test_bad_plans(kwargs):
    with pytest.raises(vw.WarmupError):
        vw.plan_prompt_lengths(**kwargs)


def test_percentile_matches_linear_interpolation():
    vals = [0.1, 0.2, 0.3, 0.4, 1.0]
    assert vw.percentile(vals, 50) == 0.3
    assert vw.percentile(vals, 99) == pytest.approx(0.4 + 0.6 * 0.96)
    assert vw.percentile([], 50) is None
    assert vw.percentile([None, 2.0], 99) == 2.0


def test_prompts_have_exact_token_length_and_vary():
    p1, p2 = vw.make_prompt(64, 1), vw.make_prompt(64, 2)
    assert len(p1) == 64 and p1 != p2
    assert all(vw.TOKEN_ID_LOW <= t < vw.TOKEN_ID_HIGH for t in p1)
    assert len(vw.make_prompt(5, 1, "text").split()) == 5


def test_cli_parsers():
    assert vw.parse_int_list("16, 64,") == [16, 64]
    assert vw.parse_histogram("16:3,64") == {16: 3.0, 64: 1.0}
    a = vw.build_parser().parse_args(["--url", "http://x", "--prompt-lens", "16,64", "--api-key-env", "K"])
    assert a.wait_ready_timeout == 600.0 and a.api_key_env == "K"


def test_standalone_file_runs_without_ansible(tmp_path):
    """The hook copy of the file runs with a Python that cannot import ansible."""
    hook = tmp_path / "vllm_warmup.py"
    hook.write_text(open(SRC).read())
    code = ("import sys; sys.modules['ansible'] = None; sys.argv = ['x', '--help'];"
            "import runpy; runpy.run_path(%r, run_name='__main__')" % str(hook))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert p.returncode == 0, p.stderr
    assert "--wait-ready-timeout" in p.stdout
    assert "import ansible" not in open(SRC).read()


def test_cli_fails_nonzero_when_server_absent(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, SRC, "--url", "http://127.0.0.1:9", "--count", "1",
                        "--wait-ready-timeout", "1", "--json-out", str(out)], capture_output=True, text=True, check=False)
    assert p.returncode == vw.EXIT_TIMEOUT
    assert "not ready 1.0s after the wait began" in p.stderr
    assert '"ok": false' in out.read_text()


def test_cli_missing_api_key_env():
    env = dict(os.environ)
    env.pop("NO_SUCH_KEY_VAR", None)
    p = subprocess.run([sys.executable, SRC, "--url", "http://127.0.0.1:9", "--api-key-env", "NO_SUCH_KEY_VAR"],
                       capture_output=True, text=True, env=env, check=False)
    assert p.returncode == 2 and "NO_SUCH_KEY_VAR" in p.stderr
