# -*- coding: utf-8 -*-
"""Run the real vllm_host_state module (through ansible) with option args_check: the
vllm_args_check checks in the host read's module run, problems returned as data."""
import json

from conftest import run_module_check

TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
        "max_position_embeddings": 1024}


def run_module(args):
    return run_module_check("vllm_host_state", args)


def _check(tmp_path, **instance):
    model = tmp_path / "tiny"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY))
    inst = dict({"name": "a", "model": str(model), "port": 18931}, **instance)
    view = [{"name": "a", "model": str(model), "env": {}, "unit": "vllm@a.service", "state_dir": str(tmp_path / "state"),
             "max_model_len": (instance.get("args") or {}).get("max_model_len")}]
    return run_module({"files": [str(model)], "args_check": {
        "instances": [inst], "python": str(tmp_path / "no-venv" / "bin" / "python"), "device": "cpu",
        "view": view, "service_user": "root", "service_group": "root", "protect_home": "false",
        "check_ports": False}})


def test_clean_instance_reads_state_and_passes(tmp_path):
    res = _check(tmp_path)
    assert not res.get("failed"), res
    assert res["files"][str(tmp_path / "tiny")]["isdir"] is True
    assert res["args_check"]["problems"] == []
    assert "msg" not in res["args_check"]
    assert res["args_check"]["parser_checked"] is False  # no venv here: skipped, said why
    assert "does not exist yet" in res["args_check"]["parser_skipped_reason"]


def test_problems_are_data_not_a_failure(tmp_path):
    res = _check(tmp_path, args={"swap_space": 4, "max_model_len": 4096})
    assert not res.get("failed"), res  # the role's next task fails on them, visible under no_log
    paths = [p["path"] for p in res["args_check"]["problems"]]
    assert "vllm_instances[0].args.swap_space" in paths
    msg = res["args_check"]["msg"]
    assert msg.startswith("vLLM options are invalid (nothing was changed)")
    # the model check, on the host: max_position_embeddings of the model's config.json
    assert "vllm_instances[0].args.max_model_len = 4096 is above" in msg and "(max_position_embeddings 1024 in " in msg


def test_invalid_args_check_options_are_problems_naming_them(tmp_path):
    """As data, like the other problems: the role's visible fail task shows them (the host read may be no_log)."""
    res = run_module({"args_check": {"instances": [], "python": "/x", "device": "tpu"}})
    assert not res.get("failed"), res
    msg = res["args_check"]["msg"]
    assert msg.startswith("args_check:") and "device" in msg and "tpu" in msg
    assert res["args_check"]["problems"][0]["path"] == "args_check"


def _generated(tmp_path, max_model_len, **tiny):
    """The role's call on a first run: the model is generated later (vllm_tiny_model_generate), not there yet."""
    model = str(tmp_path / "models" / "tiny")
    inst = {"name": "a", "model": model, "port": 18931, "args": {"max_model_len": max_model_len}}
    view = [{"name": "a", "model": model, "env": {}, "unit": "vllm@a.service", "state_dir": str(tmp_path / "state"),
             "max_model_len": max_model_len, "max_model_len_path": "vllm_instances[0].args.max_model_len"}]
    return run_module({"tiny_model": dict({"path": model}, **tiny), "args_check": {
        "instances": [inst], "python": str(tmp_path / "no-venv" / "bin" / "python"), "device": "cpu",
        "view": view, "service_user": "root", "service_group": "root", "protect_home": "false",
        "check_ports": False, "generated_models": [model]}})


def test_max_model_len_above_the_generated_models_positions_is_refused_before_it_exists(tmp_path):
    # Issue 31: max_model_len 4096 on the generated tiny model (2048 positions) was deployed, then
    # rolled back 47 s later; the check skipped models the role generates.
    res = _generated(tmp_path, 4096, num_attention_heads=4)
    assert not (tmp_path / "models").exists()
    msg = res["args_check"]["msg"]
    assert "instance a (vllm_instances[0]): vllm_instances[0].args.max_model_len = 4096 is above" in msg
    assert "max_position_embeddings 2048" in msg and "vllm_tiny_model_preset" in msg
    assert "Lower it to 2048 or less" in msg


def test_generated_preset_positions_are_the_limit(tmp_path):
    assert _generated(tmp_path, 8192, preset="llama3-8b")["args_check"]["problems"] == []
    msg = _generated(tmp_path, 16384, preset="llama3-8b")["args_check"]["msg"]
    assert "max_position_embeddings 8192" in msg and "= 16384 is above" in msg
    assert _generated(tmp_path, 2048)["args_check"]["problems"] == []
