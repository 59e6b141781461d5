# -*- coding: utf-8 -*-
"""The host's option check (vllm_args_check / vllm_host_state's args_check) on an
instance that spans hosts (issue 29): it checks the instance as its view runs it on
this node - the GPUs it needs here (the view's gpus_per_node: TP x PP / nodes) and
the argv with the multi-node options - not the raw vllm_instances entry."""
import json
import os
import pwd
import subprocess

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags as F
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V
from ansible_collections.llmops.serving.plugins.module_utils.vllm_args_check import ARGS_CHECK_SPEC, ArgsCheck

VLLM_PY = os.environ.get("VLLM_TEST_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PY, reason="VLLM_TEST_PYTHON (a vLLM venv python) is not set")
ADDRS = {"a": "10.0.0.1", "b": "10.0.0.2"}
TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048, "max_position_embeddings": 1024}


class FakeParserModule(object):
    """What ArgsCheck asks of an AnsibleModule; run_command answers as the parser
    child does (every argv valid) and keeps the argvs it was given."""
    check_mode = False

    def __init__(self):
        self.argvs = None

    def get_bin_path(self, name):
        return None

    def run_command(self, cmd, data=None, **kw):
        self.argvs = json.loads(data)["argvs"]
        out = {"results": [{"ok": True, "errors": []} for dummy in self.argvs], "vllm_version": "0.32.0",
               "elapsed": 0.1}
        return 0, "\n" + F.RESULT_MARKER + json.dumps(out) + "\n", ""


class ParserModule(FakeParserModule):
    """run_command runs the parser child for real (the vLLM venv of VLLM_TEST_PYTHON)."""

    def run_command(self, cmd, data=None, environ_update=None, **kw):
        self.argvs = json.loads(data)["argvs"]
        cp = subprocess.run(cmd, input=data, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, **(environ_update or {})))
        return cp.returncode, cp.stdout, cp.stderr


@pytest.fixture
def model(tmp_path):
    m = tmp_path / "big"
    m.mkdir()
    (m / "config.json").write_text(json.dumps(TINY))
    return str(m)


@pytest.fixture
def python(tmp_path):
    """An executable file where the venv's python would be: the parser step runs (faked)."""
    p = tmp_path / "venv" / "bin" / "python"
    p.parent.mkdir(parents=True)
    p.write_text("#!/bin/sh\n")
    p.chmod(0o755)
    return str(p)


def big(model, mode="native", tp=8, pp=2, **kw):
    base = {"name": "big", "model": model, "port": 8000, "nodes": ["a", "b"], "distributed_mode": mode,
            "args": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}}
    base.update(kw)
    return base


def view(instances, host, gpu_count=None):
    """The vllm_view the controller builds for ``host`` (gpu_count None: the play gathered no gpu_info)."""
    return V.build_view(instances, {"python": "/opt/vllm/venv/bin/python", "device": "cuda", "common_args": {},
                                    "common_env": {}, "gpu_count": gpu_count, "inventory_hostname": host,
                                    "node_addresses": ADDRS})


def host_check(instances, entries, gpu_count, python="/opt/vllm/venv/bin/python", module=None):
    """ArgsCheck as vllm_host_state runs it for the role (tasks/state.yml passes the view)."""
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate({
        "instances": instances, "python": python, "device": "cuda", "gpu_count": gpu_count, "view": entries,
        "check_ports": False, "service_user": pwd.getpwuid(os.getuid()).pw_name,
        "service_group": "root", "protect_home": "false"})
    assert not checked.error_messages, checked.error_messages
    return ArgsCheck(module or FakeParserModule()).run(checked.validated_parameters)


@pytest.mark.parametrize("host", ["a", "b"])
def test_tp8_pp2_native_over_two_8_gpu_hosts_passes_the_host_check_on_each_node(model, host):
    insts = [big(model)]
    entries = view(insts, host, gpu_count=8)
    res = host_check(insts, entries, gpu_count=8)
    assert res["problems"] == [], res["problems"]
    assert entries[0]["gpus_per_node"] == 8


def test_tp8_pp2_ray_over_two_8_gpu_hosts_passes_the_host_check_on_the_head(model):
    """Ray mode: vLLM runs on the head only (the instance is defined there); Ray places 8 ranks a node."""
    insts = [big(model, mode="ray")]
    entries = view(insts, "a", gpu_count=8)
    assert host_check(insts, entries, gpu_count=8)["problems"] == []
    assert entries[0]["gpus_per_node"] == 8


@pytest.mark.parametrize("mode,host", [("native", "a"), ("native", "b"), ("ray", "a")])
def test_tp8_pp2_over_two_4_gpu_hosts_fails_naming_instance_need_have_and_fix(model, mode, host):
    insts = [big(model, mode=mode)]
    # The controller knew no GPU count (no gpu_info): the host counts its 4 GPUs.
    res = host_check(insts, view(insts, host), gpu_count=4)
    msgs = [p["msg"] for p in res["problems"]]
    assert len(msgs) == 1, msgs
    for needle in ("vllm_instances[0].args.tensor_parallel_size", "instance big spans 2 nodes (a, b)",
                   "8 x 2 = 16 ranks / 2 nodes = 8 GPUs needed on each node",
                   "on this node the host's GPU count gives 4",
                   "Fix: nodes with 8 GPUs or more, 4 nodes in vllm_instances[0].nodes (16 ranks / 4 = 4 GPUs a node), "
                   "or lower tensor_parallel_size x pipeline_parallel_size to 4 x 2 nodes = 8 or less"):
        assert needle in msgs[0], (needle, msgs[0])
    assert res["msg"].startswith("vLLM options are invalid (nothing was changed)")


def test_tp8_pp2_over_two_4_gpu_hosts_fails_on_the_controller_too(model):
    with pytest.raises(V.InstanceViewError) as e:
        view([big(model)], "a", gpu_count=4)
    msg = str(e.value)
    assert "instance big (vllm_instances[0]): vllm_instances[0].args.tensor_parallel_size: instance big spans 2" in msg
    assert "8 GPUs needed on each node, but on this node the host's GPU count gives 4" in msg
    assert msg.count("\n- ") == 1  # one rule, one message


def test_the_parser_gets_the_argv_that_runs_with_the_multinode_flags(model, python):
    insts = [big(model)]
    for host, rank in (("a", "0"), ("b", "1")):
        entries = view(insts, host, gpu_count=8)
        module = FakeParserModule()
        res = host_check(insts, entries, 8, python, module)
        argv = module.argvs[0]
        for flag, value in (("--nnodes", "2"), ("--node-rank", rank), ("--master-addr", "10.0.0.1"),
                            ("--master-port", "29501"), ("--distributed-executor-backend", "mp")):
            assert flag in argv and argv[argv.index(flag) + 1] == value, (flag, argv)
        assert ("--headless" in argv) is (host == "b")
        # exactly the unit's argv, without the interpreter and entry point (-m MODULE; -c CODE when headless)
        assert argv == entries[0]["argv"][3:] and res["argv"]["big"] == entries[0]["argv"]
        assert res["problems"] == [] and res["parser_checked"] is True
    module = FakeParserModule()
    ray = [big(model, mode="ray")]
    host_check(ray, view(ray, "a", gpu_count=8), 8, python, module)
    argv = module.argvs[0]
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray" and "--nnodes" not in argv


@needs_vllm
def test_the_installed_vllm_parses_the_argv_of_each_node(model):
    """The host check with vLLM's own parser (VLLM_TEST_PYTHON): TP 8 x PP 2 over two 8-GPU
    nodes; the head runs a native and a ray instance (half a GPU each), the second node the
    native one's headless part. One parser run a node."""
    args = {"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "max_model_len": 512,
            "gpu_memory_utilization": 0.45}
    native, ray = big(model, args=args), big(model, mode="ray", name="big-ray", port=8001, args=args)
    for host, insts in (("a", [native, ray]), ("b", [native])):
        module = ParserModule()
        res = host_check(insts, view(insts, host, gpu_count=8), 8, VLLM_PY, module)
        assert res["parser_checked"] is True and res["problems"] == [], (host, res["problems"])
        assert "--nnodes" in module.argvs[0] and ("--headless" in module.argvs[0]) is (host == "b")


def test_common_uni_backend_is_checked_as_the_role_replaces_it(model):
    """vllm_common_args.distributed_executor_backend: uni; a spanning instance runs mp (the view's argv)."""
    insts = [big(model, tp=1)]
    settings = {"python": "/opt/vllm/venv/bin/python", "device": "cuda", "gpu_count": 1, "inventory_hostname": "a",
                "node_addresses": ADDRS, "common_args": {"distributed_executor_backend": "uni"}}
    entries = V.build_view(insts, settings)
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate({
        "instances": insts, "python": "/nowhere/python", "device": "cuda", "gpu_count": 1, "view": entries,
        "common_args": settings["common_args"], "check_ports": False, "check_models": False})
    res = ArgsCheck(FakeParserModule()).run(checked.validated_parameters)
    assert res["problems"] == [], res["problems"]


def test_a_view_of_other_instances_is_a_problem(model):
    insts = [big(model)]
    entries = view(insts, "a", gpu_count=8)
    res = host_check([dict(insts[0], name="other")], entries, 8)
    assert any(p["path"] == "view" and "same vllm_instances" in p["msg"] for p in res["problems"]), res["problems"]


def test_without_a_view_the_rule_still_counts_gpus_per_node(model):
    """vllm_args_check on its own (no view): the same rule, vllm_flags.gpus_per_node."""
    insts = [big(model)]
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate({
        "instances": insts, "python": "/nowhere/python", "device": "cuda", "gpu_count": 8, "check_ports": False})
    assert ArgsCheck(FakeParserModule()).run(checked.validated_parameters)["problems"] == []
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate({
        "instances": insts, "python": "/nowhere/python", "device": "cuda", "gpu_count": 4, "check_ports": False})
    msgs = [p["msg"] for p in ArgsCheck(FakeParserModule()).run(checked.validated_parameters)["problems"]]
    assert len(msgs) == 1 and "8 GPUs needed on each node" in msgs[0], msgs


def test_gpus_per_node_is_the_rule():
    assert F.gpus_per_node(8, 2, 1, ["a", "b"]) == 8
    assert F.gpus_per_node(8, 2, 1, None) == 16
    assert F.gpus_per_node(2, 1, 2, None) == 4  # data parallel replicas on one host
    assert F.gpus_per_node(3, 1, 1, ["a", "b"]) is None  # vllm_multinode.check names the fix
