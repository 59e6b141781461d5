"""Instances that span hosts (issue 18): the view's multi-node rules and fields,
node comparison, and Ray membership read from a real `ray status` capture."""
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode as M

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "ray")
ADDRS = {"head": "10.0.0.1", "worker": "10.0.0.2", "solo": ""}


def settings(**kw):
    base = {"python": "/opt/vllm/venv/bin/python", "device": "cpu", "common_args": {}, "common_env": {},
            "cpu_kvcache_space_gib": 1, "api_key": "", "api_keys": {}, "gpu_count": None,
            "inventory_hostname": "head", "node_addresses": ADDRS}
    base.update(kw)
    return base


def inst(**kw):
    base = {"name": "big", "model": "/srv/models/tiny", "port": 8000, "nodes": ["head", "worker"],
            "distributed_mode": "native", "args": {"pipeline_parallel_size": 2}}
    base.update(kw)
    return base


def fails(instance, needles, **kw):
    with pytest.raises(V.InstanceViewError) as e:
        V.build_view([instance], settings(**kw))
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


# --- view fields ------------------------------------------------------------------

def test_native_head_argv_and_fields():
    v = V.build_view([inst()], settings())[0]
    argv = v["argv"]
    for pair in (["--nnodes", "2"], ["--node-rank", "0"], ["--master-addr", "10.0.0.1"],
                 ["--master-port", "29501"], ["--distributed-executor-backend", "mp"]):
        i = argv.index(pair[0])
        assert argv[i + 1] == pair[1], (pair, argv)
    assert "--headless" not in argv
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert v["env"]["VLLM_HOST_IP"] == "10.0.0.1"
    assert (v["nodes"], v["distributed_mode"], v["node_rank"], v["serves_http"]) == (
        ["head", "worker"], "native", 0, True)


def test_native_worker_is_headless_with_its_own_ip():
    v = V.build_view([inst()], settings(inventory_hostname="worker"))[0]
    assert "--headless" in v["argv"]
    assert v["argv"][1] == "-c" and "run_headless" in v["argv"][2]
    assert v["argv"][v["argv"].index("--node-rank") + 1] == "1"
    assert v["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    assert v["serves_http"] is False


def test_single_host_instance_keeps_defaults():
    v = V.build_view([{"name": "a", "model": "/m"}], settings())[0]
    assert (v["nodes"], v["distributed_mode"], v["node_rank"], v["serves_http"]) == (None, None, 0, True)
    assert "--nnodes" not in v["argv"] and "VLLM_HOST_IP" not in v["env"]


def test_common_uni_backend_is_replaced_on_a_spanning_instance():
    v = V.build_view([inst()], settings(common_args={"distributed_executor_backend": "uni"}))[0]
    assert v["argv"][v["argv"].index("--distributed-executor-backend") + 1] == "mp"


def test_ray_mode_on_gpu_head_uses_the_ray_backend():
    v = V.build_view([inst(distributed_mode="ray", gpus=[0], args={"pipeline_parallel_size": 2})],
                     settings(device="cuda", gpu_count=1))[0]
    assert v["argv"][v["argv"].index("--distributed-executor-backend") + 1] == "ray"
    assert "--nnodes" not in v["argv"]


# --- rules (each must fail before any change) -------------------------------------

def test_ray_mode_on_cpu_names_native():
    fails(inst(distributed_mode="ray"), ["does not support ray", "distributed_mode: native"])


def test_unknown_mode():
    fails(inst(distributed_mode="mpi"), ["vllm_instances[0].distributed_mode must be one of ray, native"])


def test_mode_without_nodes():
    fails({"name": "a", "model": "/m", "distributed_mode": "native"}, ["vllm_instances[0].nodes"])


def test_one_node_and_duplicates():
    fails(inst(nodes=["head"]), ["needs at least 2"])
    fails(inst(nodes=["head", "head"]), ["names head more than once"])


def test_ranks_must_split_over_nodes():
    fails(inst(args={"tensor_parallel_size": 3}), ["3 ranks do not split evenly over 2 nodes"])


def test_each_node_needs_tp_times_pp_over_nodes_gpus():
    """vllm_flags.gpus_per_node: TP x PP / nodes on each node, compared with the node's GPUs
    (more GPUs than that are left idle, as on a single host)."""
    v = V.build_view([inst(distributed_mode="ray", gpus=[0, 1], args={"pipeline_parallel_size": 2})],
                     settings(device="cuda", gpu_count=2))[0]
    assert v["gpus_per_node"] == 1
    # 4 GPUs a node, TP 4 x PP 2 across 2 nodes: valid although one host has only 4.
    v = V.build_view([inst(distributed_mode="ray", gpus=[0, 1, 2, 3],
                           args={"tensor_parallel_size": 4, "pipeline_parallel_size": 2})],
                     settings(device="cuda", gpu_count=4))[0]
    assert v["gpus_per_node"] == 4
    fails(inst(distributed_mode="ray", gpus=[0], args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2}),
          ["instance big (vllm_instances[0])", "4 ranks / 2 nodes = 2 GPUs needed on each node",
           "vllm_instances[0].gpus ([0]) gives 1", "list 2 GPUs in vllm_instances[0].gpus"],
          device="cuda", gpu_count=2)


def test_role_derived_options_refused():
    fails(inst(args={"pipeline_parallel_size": 2, "nnodes": 2}), ["args.nnodes is set by the role"])


def test_ray_instance_only_on_the_head():
    fails(inst(distributed_mode="ray", gpus=[0]), ["vLLM runs on the head only"], device="cuda", gpu_count=1,
          inventory_hostname="worker")


def test_host_not_among_nodes():
    fails(inst(), ["does not include this host (solo)"], inventory_hostname="solo")


def test_node_without_private_address():
    fails(inst(nodes=["head", "solo"]), ["no private address for solo", "vllm_node_address"])


# --- node comparison ---------------------------------------------------------------

def test_compare_nodes_names_the_differing_node():
    same = {"vllm_version": "0.32.0", "venv": "/opt/vllm/venv",
            "model": {"config.json": {"size": 10, "sha256": "aa"}}}
    assert M.compare_nodes("big", {"head": same, "worker": dict(same)}) == []
    other = dict(same, vllm_version="0.31.0", model={"config.json": {"size": 11, "sha256": "bb"}})
    probs = M.compare_nodes("big", {"head": same, "worker": other})
    assert any("node worker has vLLM version '0.31.0'" in p for p in probs), probs
    assert any("node worker model file config.json is 11 bytes" in p for p in probs), probs
    probs = M.compare_nodes("big", {"head": same, "worker": dict(same, model={})})
    assert any("config.json is missing" in p for p in probs), probs


# --- Ray membership on real `ray status` captures ----------------------------------

def _capture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


EXPECTED = {"ray-head": {"CPU": 1}, "ray-worker": {"CPU": 1}}


def test_membership_both_nodes():
    st = M.parse_ray_status(_capture("status_two_nodes.txt"))
    assert st["active"] == 2
    r = M.membership(EXPECTED, st)
    assert r["ok"] and r["missing"] == [], r


def test_membership_names_the_missing_worker():
    st = M.parse_ray_status(_capture("status_worker_gone.txt"))
    r = M.membership(EXPECTED, st)
    assert not r["ok"] and r["missing"] == ["ray-worker"], r
    assert "node ray-worker has not joined" in r["problems"][0]


def test_membership_resources_short():
    st = M.parse_ray_status(_capture("status_two_nodes.txt"))
    r = M.membership({"ray-head": {"CPU": 1}, "ray-worker": {"CPU": 4}}, st)
    assert not r["ok"] and "CPU" in r["problems"][0], r


def test_empty_kvcache_space_leaves_the_kv_size_to_vllm():
    # vLLM 0.32 fails on VLLM_CPU_KVCACHE_SPACE="" (int('')): "" removes the variable.
    env = V.instance_env(inst(env={"VLLM_CPU_KVCACHE_SPACE": ""}), settings())
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and env["VLLM_HOST_IP"] == "10.0.0.1"
    assert V.instance_env(inst(), settings())["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_cpu_tensor_parallel_disables_torch_compile():
    # vLLM 0.32.0 torch.compiles the vocab-parallel embedding mask when TP > 1,
    # and inductor needs a C++ compiler on CPU (measured on the test bed).
    tp2 = inst(args={"tensor_parallel_size": 2})
    assert V.instance_env(tp2, settings())["TORCH_COMPILE_DISABLE"] == "1"
    assert V.build_view([tp2], settings(inventory_hostname="worker"))[0]["env"]["TORCH_COMPILE_DISABLE"] == "1"
    assert "TORCH_COMPILE_DISABLE" not in V.instance_env(inst(), settings())  # PP only: TP 1
    assert "TORCH_COMPILE_DISABLE" not in V.instance_env(tp2, settings(device="cuda"))
    assert "TORCH_COMPILE_DISABLE" not in V.instance_env(dict(tp2, env={"TORCH_COMPILE_DISABLE": ""}), settings())
    common = settings(common_args={"tensor_parallel_size": 2})
    assert V.instance_env(inst(args={}), common)["TORCH_COMPILE_DISABLE"] == "1"


def test_headless_node_has_no_warmup_hook():
    warm = {"wait_ready_timeout": 600}
    head = V.build_view([inst()], settings(warmup=warm))[0]
    worker = V.build_view([inst()], settings(warmup=warm, inventory_hostname="worker"))[0]
    assert "vllm-warmup.py" in head["exec_start_post"]
    assert worker["exec_start_post"] is None


# --- ports between the nodes -------------------------------------------------------

def test_port_checks_name_the_head_master_port():
    view = V.build_view([inst(master_port=26510)], settings(inventory_hostname="worker"))
    assert view[0]["master_port"] == 26510
    assert M.port_checks(view) == [{"owner": "head", "address": "10.0.0.1", "port": 26510,
                                    "what": "instance big: master_port, the torch.distributed rendezvous",
                                    "peers": ["worker"]}]
    # single-host instances need no port between nodes
    assert M.port_checks(V.build_view([{"name": "a", "model": "/m", "port": 8000}], settings())) == []


def test_port_problems_name_the_node_and_the_port():
    checks = M.port_checks(V.build_view([inst(master_port=26510)], settings()))
    key = "10.0.0.1,26510"
    assert M.port_problems(checks, "head", {key: "reached"}, {}) == []
    assert M.port_problems(checks, "head", {key: "in use"}, {}) == []
    assert M.port_problems(checks, "worker", {}, {key: None}) == []
    (p,) = M.port_problems(checks, "head", {key: "cannot bind: Cannot assign requested address"}, {})
    assert p.startswith("node head cannot listen on 10.0.0.1:26510 (instance big: master_port") and \
        "Cannot assign requested address" in p and "vllm_node_address" in p, p
    (p,) = M.port_problems(checks, "worker", {}, {key: "Timeout when waiting for 10.0.0.1:26510"})
    assert p.startswith("node worker cannot reach head at 10.0.0.1:26510") and "open TCP 26510 on head to worker" in p, p


def test_port_filters_read_the_listener_and_wait_for_results():
    from ansible_collections.llmops.serving.plugins.filter import ray_cluster as F
    checks = M.port_checks(V.build_view([inst(master_port=26510)], settings()))
    assert F.vllm_port_listen_args(checks, "head") == ["10.0.0.1,26510,1"]
    assert F.vllm_port_listen_args(checks, "worker") == []
    ok = [{"item": checks[0], "state": "started", "failed": False}]
    # what wait_for returns on a timeout once failed_when: false has run
    timeout = [{"item": checks[0], "failed": False, "elapsed": 3, "msg": "Timeout when waiting for 10.0.0.1:26510"}]
    assert F.vllm_port_problems(checks, "worker", {}, ok) == []
    (p,) = F.vllm_port_problems(checks, "worker", {}, timeout)
    assert "node worker cannot reach head at 10.0.0.1:26510" in p and "Timeout when waiting" in p


def _view(*nodes):
    return [{"name": "big", "nodes": list(nodes)}]


def test_spanning_instance_split_across_batches_is_named():
    views = {"a": _view("a", "b")}
    problems = M.batch_problems(views, ["a"], ["a", "b", "c"])
    assert len(problems) == 1
    assert "instance big spans a, b" in problems[0] and "only a (b in a later batch)" in problems[0]
    assert "-e vllm_serial=100%" in problems[0]


def test_spanning_instance_in_one_batch_passes():
    views = {"a": _view("a", "b"), "b": _view("a", "b"), "c": []}
    assert M.batch_problems(views, ["a", "b", "c"], ["a", "b", "c"]) == []
    assert M.batch_problems(views, ["a", "b"], ["a", "b", "c"]) == []
    # a --limit that leaves a node out of the play: not this check's to say
    assert M.batch_problems({"a": _view("a", "b")}, ["a"], ["a"]) == []
    # instances on one host: nothing to say
    assert M.batch_problems({"a": [{"name": "x", "nodes": None}]}, ["a"], ["a", "b"]) == []


def test_spanning_is_the_entries_with_nodes_and_the_filter_checks_its_input():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmops.serving.plugins.filter.ray_cluster import vllm_spanning_instances
    view = [{"name": "one"}, {"name": "empty", "nodes": []}, {"name": "two", "nodes": ["h", "w"]}]
    assert [v["name"] for v in vllm_spanning_instances(view)] == ["two"]
    assert vllm_spanning_instances(None) == []
    with pytest.raises(AnsibleFilterError, match="expects a vllm_view"):
        vllm_spanning_instances({"name": "two", "nodes": ["h", "w"]})


# --- what serves HTTP, and restarts of a spanning instance --------------------------

def test_serving_leaves_out_the_headless_parts():
    head = V.build_view([inst(), {"name": "solo", "model": "/srv/models/tiny", "port": 8001}], settings())
    worker = V.build_view([inst(), {"name": "solo", "model": "/srv/models/tiny", "port": 8001}],
                          settings(inventory_hostname="worker"))
    assert [v["name"] for v in M.serving(head)] == ["big", "solo"]
    # the worker's part of `big` is headless: only its single-host instance serves the API there
    assert [v["name"] for v in M.serving(worker)] == ["solo"]
    assert M.serving(None) == []


def test_a_change_on_any_node_restarts_the_spanning_instance_on_every_node():
    view = V.build_view([inst(), {"name": "solo", "model": "/srv/models/tiny", "port": 8001}],
                        settings(inventory_hostname="worker"))
    # only the worker's env file of `big` changed: the head restarts its part too (and the worker its own)
    assert M.spanning_restarts(view, {"head": [], "worker": ["big"]}) == ["big"]
    assert M.spanning_restarts(view, {"head": ["big"], "worker": []}) == ["big"]
    # a single-host instance's change stays on its host; nothing changed: nothing restarts
    assert M.spanning_restarts(view, {"head": ["solo"], "worker": []}) == []
    assert M.spanning_restarts(view, {}) == []


def test_the_restart_filters_check_their_input():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmops.serving.plugins.filter.ray_cluster import vllm_spanning_restarts
    assert [v["name"] for v in M.serving([{"name": "a"}, {"name": "b", "serves_http": False}])] == ["a"]
    with pytest.raises(AnsibleFilterError, match="expects {node: "):
        vllm_spanning_restarts([], ["big"])


# --- the interface the ranks talk on (gloo / NCCL) ------------------------------------

def _node_facts(**kw):
    """A real capture of node_facts.py (tests/fixtures/ray/node_facts_vm.json): interfaces lo and
    eth0 (192.0.2.2/24), the hostname resolving to 127.0.0.1; the node's inventory values added."""
    import json
    with open(os.path.join(FIXTURES, "node_facts_vm.json")) as f:
        facts = json.load(f)
    facts.update(kw)
    return facts


def test_interface_sets_gloo_and_on_gpu_nccl_unless_the_instance_does():
    cpu = V.build_view([inst()], settings(node_interface="eth1"))[0]
    assert cpu["env"]["GLOO_SOCKET_IFNAME"] == "eth1" and "NCCL_SOCKET_IFNAME" not in cpu["env"]
    gpu = V.build_view([inst(args={"pipeline_parallel_size": 2}, gpus=[0])],
                       settings(node_interface="eth1", device="cuda", gpu_count=1))[0]
    assert gpu["env"]["GLOO_SOCKET_IFNAME"] == "eth1" and gpu["env"]["NCCL_SOCKET_IFNAME"] == "eth1"
    own = V.build_view([inst(env={"GLOO_SOCKET_IFNAME": "bond0"})], settings(node_interface="eth1"))[0]
    assert own["env"]["GLOO_SOCKET_IFNAME"] == "bond0"
    off = V.build_view([inst(env={"GLOO_SOCKET_IFNAME": ""})], settings(node_interface="eth1"))[0]
    assert "GLOO_SOCKET_IFNAME" not in off["env"]
    # unset: nothing (and a single-host instance never gets it)
    assert "GLOO_SOCKET_IFNAME" not in V.build_view([inst()], settings())[0]["env"]
    solo = V.build_view([{"name": "solo", "model": "/srv/models/tiny"}], settings(node_interface="eth1"))[0]
    assert "GLOO_SOCKET_IFNAME" not in solo["env"]


def test_a_hostname_on_loopback_fails_before_any_change_naming_the_interface():
    p = M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface=""))
    assert len(p) == 1 and "node worker's hostname resolves to the loopback address 127.0.0.1" in p[0], p
    assert "set vllm_node_interface: eth0 (the interface that holds 192.0.2.2)" in p[0], p
    p = M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface="", hostname_address=None))
    assert "does not resolve" in p[0], p
    # a hostname on the private address, or an interface that holds it: fine
    assert M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface="",
                                                             hostname_address="192.0.2.2")) == []
    assert M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface="eth0")) == []


def test_an_interface_that_does_not_hold_the_address_is_named():
    p = M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface="lo"))
    assert "interface lo (vllm_node_interface) does not hold vllm_node_address 192.0.2.2" in p[0], p
    assert "set vllm_node_interface: eth0" in p[0], p
    p = M.interface_problems("big", "worker", _node_facts(address="192.0.2.2", interface="eth9"))
    assert "has no interface eth9" in p[0] and "eth0, lo" in p[0], p
    p = M.interface_problems("big", "worker", _node_facts(address="198.51.100.7", interface="eth0"))
    assert "on none of its interfaces: fix vllm_node_address" in p[0], p


def test_loopback_node_addresses_need_no_interface_and_unknown_interfaces_are_not_judged():
    # the test bed: nodes on 127.0.0.2/.3 in one network namespace
    assert M.interface_problems("tp2", "ray-worker", _node_facts(address="127.0.0.3", interface="")) == []
    assert M.interface_problems("tp2", "ray-worker", _node_facts(address="127.0.0.3", interface="lo")) == []
    # no iproute2 on the node: nothing to judge
    assert M.interface_problems("big", "w", _node_facts(address="192.0.2.2", interface="", interfaces=None)) == []


def test_nodes_compare_filter_adds_the_interface_problems():
    from ansible_collections.llmops.serving.plugins.filter.ray_cluster import vllm_nodes_compare
    view = V.build_view([inst()], settings())[0]
    ok = _node_facts(vllm_version="0.32.0", venv="/opt/vllm/venv", models={}, address="192.0.2.2", interface="eth0")
    assert vllm_nodes_compare(view, {"head": ok, "worker": ok}) == []
    bad = dict(ok, interface="")
    p = vllm_nodes_compare(view, {"head": ok, "worker": bad})
    assert len(p) == 1 and "node worker's hostname resolves" in p[0], p
