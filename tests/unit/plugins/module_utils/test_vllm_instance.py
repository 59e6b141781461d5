"""The instance view: fields, quoting, and every hole of issue 13 (one test each)."""
import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V

PY = "/opt/vllm/venv/bin/python"
KEY = "view-test-key-9c1d"


def settings(**kw):
    base = {"python": PY, "install_dir": "/opt/vllm", "home": "/var/lib/vllm", "config_dir": "/etc/vllm",
            "unit_dir": "/etc/systemd/system", "device": "cpu", "common_args": {},
            "common_env": {"HF_HUB_OFFLINE": "1"}, "cpu_kvcache_space_gib": 1, "api_key": "", "api_keys": {},
            "default_gpu_memory_utilization": 0.92, "gpu_count": None, "allow_public_bind": False,
            "allow_unauthenticated_public_bind": False, "gateway": False,
            "warmup": {"wait_ready_timeout": 600, "prompt_lens": [16, 64], "max_tokens": 16, "count": 8,
                       "concurrency": 2, "ignore_errors": False}}
    base.update(kw)
    return base


def inst(**kw):
    base = {"name": "a", "model": "/srv/models/tiny", "served_model_name": "tiny", "host": "127.0.0.1",
            "port": 8000}
    base.update(kw)
    return base


def fails(instances, needles, **kw):
    with pytest.raises(V.InstanceViewError) as e:
        V.build_view(instances, settings(**kw))
    msg = str(e.value)
    for n in needles:
        assert n in msg, (n, msg)
    return msg


# --- fields -----------------------------------------------------------------------

def test_view_fields_of_the_default_instance():
    v = V.build_view([inst()], settings())[0]
    assert v["name"] == "a" and v["unit"] == "vllm@a.service"
    assert v["dropin_path"] == "/etc/systemd/system/vllm@a.service.d/10-instance.conf"
    assert v["env_path"] == "/etc/vllm/a.env"
    assert v["state_dir"] == "/var/lib/vllm/a" and v["cache_dir"] == "/var/lib/vllm/a/cache"
    assert v["served_model_name"] == ["tiny"] and v["served_name"] == "tiny"
    assert v["url"] == "http://127.0.0.1:8000" and v["port"] == 8000 and v["probe_host"] == "127.0.0.1"
    assert v["gpus"] is None and v["tensor_parallel_size"] == 1 and v["pipeline_parallel_size"] == 1
    assert v["gpu_memory_utilization"] == 0.92 and v["max_model_len"] is None
    assert v["has_api_key"] is False and v["public_bind"] is False and v["public_without_key"] is False
    assert v["argv"] == [PY, "-m", vllm_args.SERVER_MODULE, "--model", "/srv/models/tiny",
                         "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "8000"]
    assert v["exec_start"] == vllm_args.systemd_exec(v["argv"])
    assert "--url http://127.0.0.1:8000" in v["exec_start_post"]
    assert "--api-key-env" not in v["exec_start_post"]
    assert v["secret_env_keys"] == [] and v["device"] == "cpu"
    assert v["env"] == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_view_carries_every_path_of_the_instance_from_the_one_rule():
    s = settings(unit_dir="/u", config_dir="/c", home="/h", rollback_dir="/r")
    v = V.build_view([inst(name="m-1")], s)[0]
    paths = V.instance_paths("m-1", s)
    assert dict((k, v[k]) for k in paths) == paths
    assert paths == {
        "unit": "vllm@m-1.service", "dropin_dir": "/u/vllm@m-1.service.d",
        "dropin_path": "/u/vllm@m-1.service.d/10-instance.conf", "env_path": "/c/m-1.env",
        "state_dir": "/h/m-1", "cache_dir": "/h/m-1/cache",
        "watchdog_unit": "vllm-watchdog@m-1.service", "watchdog_timer": "vllm-watchdog@m-1.timer",
        "watchdog_dropin_dir": "/u/vllm-watchdog@m-1.service.d",
        "watchdog_dropin_path": "/u/vllm-watchdog@m-1.service.d/10-instance.conf",
        "watchdog_state": "/var/lib/vllm-watchdog/m-1.json",
        "snapshot_dir": "/r/m-1", "snapshot_dropin": "/r/m-1/10-instance.conf", "snapshot_env": "/r/m-1/instance.env",
        "remove_units": ["vllm-watchdog@m-1.timer", "vllm-watchdog@m-1.service", "vllm@m-1.service"],
        "remove": ["/u/vllm@m-1.service.d", "/c/m-1.env", "/h/m-1",
                   "/u/vllm-watchdog@m-1.service.d", "/var/lib/vllm-watchdog/m-1.json"]}


def test_watchdog_state_path_is_the_scripts_own():
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_watchdog
    assert V.instance_paths("a", {})["watchdog_state"] == vllm_watchdog.state_path("a")


def test_snapshot_files_pair_each_file_with_its_place():
    files = V.snapshot_files(["a", "b"], {"unit_dir": "/u", "config_dir": "/c", "rollback_dir": "/r"})
    assert [(f["kind"], f["name"], f["path"], f["dest"]) for f in files] == [
        ("unit", "", "/u/vllm@.service", "/r/vllm@.service"),
        ("dropin", "a", "/u/vllm@a.service.d/10-instance.conf", "/r/a/10-instance.conf"),
        ("dropin", "b", "/u/vllm@b.service.d/10-instance.conf", "/r/b/10-instance.conf"),
        ("env", "a", "/c/a.env", "/r/a/instance.env"), ("env", "b", "/c/b.env", "/r/b/instance.env")]


def test_served_name_falls_back_to_the_model_and_lists_stay_lists():
    v = V.build_view([inst(served_model_name=None), inst(name="b", port=8001, served_model_name=["x", "y"])],
                     settings())
    assert v[0]["served_name"] == "/srv/models/tiny" and v[0]["served_model_name"] == []
    assert v[1]["served_name"] == "x" and v[1]["served_model_name"] == ["x", "y"]


def test_key_decides_has_api_key_and_the_hook_but_never_appears():
    s = settings(api_key=KEY, api_keys={"b": ""})
    view = V.build_view([inst(), inst(name="b", port=8001)], s)
    assert view[0]["has_api_key"] and not view[1]["has_api_key"]
    assert "--api-key-env VLLM_API_KEY" in view[0]["exec_start_post"]
    assert KEY not in repr(view)


def test_api_key_rule_written_once():
    assert V.instance_api_key("a", "k", {}) == "k"
    assert V.instance_api_key("a", "k", {"a": "own"}) == "own"
    assert V.instance_api_key("a", "k", {"a": ""}) == ""
    assert V.instance_api_key("a", "", {"b": "x"}) == ""


def test_effective_gpu_memory_utilization_and_model_len():
    v = V.build_view([inst(args={"gpu_memory_utilization": 0.5, "max_model_len": "32k"})],
                     settings(default_gpu_memory_utilization=0.8))[0]
    assert v["gpu_memory_utilization"] == 0.5 and v["max_model_len"] == 32000
    v = V.build_view([inst()], settings(default_gpu_memory_utilization=0.8, common_args={"max_model_len": "4K"}))[0]
    assert v["gpu_memory_utilization"] == 0.8 and v["max_model_len"] == 4096


def test_settings_as_strings_from_older_ansible():
    v = V.build_view([inst()], settings(gpu_count="None", default_gpu_memory_utilization="0.9",
                                        allow_public_bind="False", warmup="None"))[0]
    assert v["gpu_memory_utilization"] == 0.9 and v["exec_start_post"] is None


# --- issue 16 (CPU part): TP=2 on two GPUs, two single-GPU instances --------------

def test_tp2_on_gpus_0_1_renders_argv_and_visible_devices():
    i = inst(gpus=[0, 1], args={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9})
    v = V.build_view([i], settings(device="cuda", gpu_count=2))[0]
    assert v["gpus"] == [0, 1] and v["tensor_parallel_size"] == 2
    assert v["argv"][-4:] == ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.9"]
    assert V.instance_env(i, settings(device="cuda"))["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in v["env"]


def test_two_single_gpu_instances_on_8000_8001_each_see_their_gpu():
    a = inst(name="g0", port=8000, gpus=[0])
    b = inst(name="g1", port=8001, gpus=[1])
    view = V.build_view([a, b], settings(device="cuda", gpu_count=2))
    assert [v["url"] for v in view] == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    # Each unit opens only its own GPU's node (device_allow), so CUDA numbers it 0 in both.
    assert [v["gpus_used"] for v in view] == [[0], [1]]
    assert [v["env"]["CUDA_VISIBLE_DEVICES"] for v in view] == ["0", "0"]
    assert "/dev/nvidia1 rw" in view[1]["device_allow"] and "/dev/nvidia0 rw" not in view[1]["device_allow"]
    view = V.build_view([a, b], settings(device="cuda", gpu_count=2, gpu_isolation=False))
    assert [v["env"]["CUDA_VISIBLE_DEVICES"] for v in view] == ["0", "1"]
    assert view[1]["argv"][-2:] == ["--port", "8001"]


# --- holes ---------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("served_model_name", "tiny\rUser=root\rExecStartPre=+/x"),
    ("model", "/srv/models/tiny\nUser=root"),
    ("host", "127.0.0.1\x00"),
    ("args", {"max_num_seqs": "8\x7f"}),
    ("args", {"chat_template": "x\x85y"}),
    ("env", {"FOO": "a\rb"}),
])
def test_control_characters_are_rejected(field, value):
    msg = fails([inst(**{field: value})], ["instance a", "vllm_instances[0].%s" % field, "control character"])
    assert "remove it" in msg


def test_control_character_in_a_secret_is_rejected_without_showing_it():
    msg = fails([inst()], ["vllm_api_keys.a", "control character"], api_keys={"a": "sec\nret-value"})
    assert "ret-value" not in msg
    msg = fails([inst(env={"HF_TOKEN": "hf_abc\r"})], ["vllm_instances[0].env.HF_TOKEN"])
    assert "hf_abc" not in msg


def test_systemd_quote_escapes_control_characters():
    assert vllm_args.systemd_quote("tiny\rUser=root") == '"tiny\\x0dUser=root"'
    assert vllm_args.systemd_quote("a\nb") == '"a\\x0ab"'
    assert vllm_args.systemd_quote("\x00") == '"\\x00"'
    assert vllm_args.systemd_quote("a\x85") == '"a\\u0085"'
    for c in [chr(n) for n in list(range(0, 32)) + list(range(0x7f, 0xa0))]:
        out = vllm_args.systemd_quote("x" + c + "y")
        assert c not in out and "\r" not in out and "\n" not in out


def test_env_keys_must_be_names():
    fails([inst(env={"BAD KEY": "1"})], ["vllm_instances[0].env", "'BAD KEY'", "not a valid environment"])
    fails([inst(env={"1X": "1"})], ["not a valid environment"])
    fails([inst()], ["vllm_common_env", "'A=B'"], common_env={"A=B": "1"})


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_names_are_rejected(name):
    fails([inst(name=name)], ["vllm_instances[0].name", "not a valid instance name", "parent"])


@pytest.mark.parametrize("port", [80, 1023, 0, 65536, "http"])
def test_ports_outside_1024_65535_are_rejected(port):
    fails([inst(port=port)], ["vllm_instances[0].port", "1024..65535", "without capabilities"])


def test_port_1024_and_65535_pass_and_duplicates_fail():
    V.build_view([inst(port=1024), inst(name="b", port=65535)], settings())
    fails([inst(), inst(name="b")], ["vllm_instances[1].port", "also used by vllm_instances[0]"])


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "node1.example.com", "fe80::1"])
def test_public_bind_without_key_is_refused_and_says_why(host):
    fails([inst(host=host)], ["vllm_instances[0].host", "no API key", "/invocations", "/tokenize",
                              "vllm_allow_unauthenticated_public_bind"])


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7"])
def test_public_bind_with_key_needs_the_explicit_override(host):
    fails([inst(host=host)], ["/invocations", "vllm_allow_public_bind"], api_key=KEY)
    v = V.build_view([inst(host=host)], settings(api_key=KEY, allow_public_bind=True))[0]
    assert v["public_bind"] and not v["public_without_key"]


def test_public_bind_overrides_and_gateway():
    v = V.build_view([inst(host="0.0.0.0")], settings(allow_unauthenticated_public_bind=True))[0]
    assert v["public_without_key"] and v["probe_host"] == "127.0.0.1"
    assert V.build_view([inst(host="10.1.1.1")], settings(gateway=True))[0]["public_bind"]
    fails([inst(host="0.0.0.0")], ["vllm_allow_public_bind"], allow_public_bind=True)  # no key: not enough


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "8.8.8.8", "2001:4860::8888"])
def test_behind_a_gateway_a_wildcard_or_public_bind_fails(host):
    # Even with a key and the public-bind override: the gateway is the only public listener.
    fails([inst(host=host)], ["vllm_instances[0].host", "a gateway fronts the instances", "gateway_upstream_address"],
          gateway=True, allow_public_bind=True, api_key="k")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1"])
def test_loopback_is_not_public(host):
    assert not V.build_view([inst(host=host)], settings())[0]["public_bind"]


def test_ipv6_urls_are_bracketed():
    assert V.build_view([inst(host="::1")], settings())[0]["url"] == "http://[::1]:8000"
    v = V.build_view([inst(host="fd00::5")], settings(gateway=True))[0]
    assert v["url"] == "http://[fd00::5]:8000" and "--url http://[fd00::5]:8000" in v["exec_start_post"]


@pytest.mark.parametrize("env_key", ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_API_KEY",
                                     "GCP_CREDENTIALS"])
def test_secret_named_env_is_listed_by_name_only(env_key):
    v = V.build_view([inst(env={env_key: "s3cr3t-value", "TOKENIZERS_PARALLELISM": "false"})], settings())[0]
    assert v["secret_env_keys"] == [env_key] and v["has_secrets"]
    assert "s3cr3t-value" not in repr(v)
    assert v["env"]["TOKENIZERS_PARALLELISM"] == "false"


@pytest.mark.parametrize("arg", ["hf_token", "hf-token", "client_secret", "db_password", "openai_api_key"])
def test_secret_named_arg_is_refused(arg):
    fails([inst(args={arg: "x"})], ["vllm_instances[0].args.%s" % arg, "0644", "put it in env", "vllm_api_keys"])


def test_api_key_arg_keeps_its_own_message_and_env_key_is_refused():
    fails([inst(args={"api_key": "x"})], ["api_key", "vllm_api_key"])
    fails([inst(env={"VLLM_API_KEY": "x"})], ["env.VLLM_API_KEY", "vllm_api_keys.a"])
    fails([inst()], ["vllm_common_env.VLLM_API_KEY"], common_env={"VLLM_API_KEY": "x"})


def test_tp2_with_uni_executor_on_cpu_is_refused():
    fails([inst(args={"tensor_parallel_size": 2})], ["instance a", "tensor_parallel_size", "uni",
                                                     "distributed_executor_backend: mp"],
          common_args={"distributed_executor_backend": "uni"})


@pytest.mark.parametrize("where", ["args", "common_args", "top"])
@pytest.mark.parametrize("key", ["enable_flash_attn", "use_flash_attn", "use_v2_attention"])
def test_flash_attn_knobs_get_advice_that_fits_the_device(key, where):
    # Issue 31: on a CPU host the advice was `attention_backend: FLASH_ATTN`, which vllm-cpu cannot run.
    kw = {}
    instance = inst()
    if where == "args":
        instance = inst(args={key: True})
    elif where == "top":
        instance = inst(**{key: True})
    else:
        kw["common_args"] = {key: True}
    cpu = fails([instance], [key, "vllm-cpu has no FlashAttention backend", "CPU_ATTN", "remove the option"], **kw)
    assert "attention_backend: FLASH_ATTN" not in cpu
    cuda = fails([instance], [key, "attention_backend: FLASH_ATTN"], device="cuda", **kw)
    assert "vllm-cpu" not in cuda


def test_pp2_with_uni_executor_names_pipeline_parallel_size_not_tp():
    # Issue 31: with only pipeline_parallel_size above 1, the fix said "tensor_parallel_size: 1".
    msg = fails([inst(args={"pipeline_parallel_size": 2})],
                ["instance a", "vllm_instances[0].args.pipeline_parallel_size", "1 x 2 = 2",
                 "pipeline_parallel_size: 1", "distributed_executor_backend: mp"],
                common_args={"distributed_executor_backend": "uni"})
    assert "tensor_parallel_size: 1" not in msg
    msg = fails([inst(args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})],
                ["tensor_parallel_size: 1", "pipeline_parallel_size: 1", "2 x 2 = 4"],
                common_args={"distributed_executor_backend": "uni"})


def test_tp_above_gpus_given_or_counted_is_refused():
    fails([inst(gpus=[0], args={"tensor_parallel_size": 2})], ["vllm_instances[0].gpus", "= 2 GPUs"],
          device="cuda")
    fails([inst(args={"tensor_parallel_size": 4, "pipeline_parallel_size": 2})], ["the host's GPU count"],
          device="cuda", gpu_count=4)


def test_gpus_shared_by_pinned_instances_over_1_are_refused():
    fails([inst(gpus=[0, 1]), inst(name="b", port=8001, gpus=[1], args={"gpu_memory_utilization": 0.5})],
          ["GPU 1 is shared", "1.42 > 1"], device="cuda", gpu_count=2)


def test_instances_without_gpus_on_a_gpu_host_share_every_gpu():
    msg = fails([inst(args={"gpu_memory_utilization": 0.6}), inst(name="b", port=8001)],
                ["is shared", "without `gpus` uses every GPU", "vllm_default_gpu_memory_utilization = 0.92"],
                device="cuda", gpu_count=1)
    assert "1.52" in msg
    V.build_view([inst(args={"gpu_memory_utilization": 0.45}),
                  inst(name="b", port=8001, args={"gpu_memory_utilization": 0.45})],
                 settings(device="cuda", gpu_count=1))


def test_attention_backend_env_advice_fits_the_device():
    cpu = fails([inst(env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})], ["VLLM_ATTENTION_BACKEND", "CPU host"])
    assert "attention_backend: FLASH_ATTN" not in cpu
    fails([inst(env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})], ["attention_backend: FLASH_ATTN"], device="cuda")


def test_bad_max_model_len_syntax_names_the_variable():
    fails([inst(args={"max_model_len": "lots"})], ["vllm_instances[0].args.max_model_len", "32k"])


def test_every_problem_listed_at_once():
    msg = fails([inst(name=".."), inst(name="b", port=80)], ["vllm_instances[0].name", "vllm_instances[1].port"])
    assert msg.startswith("vllm_instances are invalid (nothing was changed)")


def test_modules_read_the_key_from_the_env_file_as_the_template_escapes_it(tmp_path):
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_client
    key = 'k"ey\\with$quote'
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')  # instance.env.j2's escaping
    env = tmp_path / "a.env"
    env.write_text('#\n# managed\nHF_HUB_OFFLINE="1"\nVLLM_API_KEY="%s"\n' % escaped)
    assert vllm_client.read_env_file_key(str(env)) == key
    assert vllm_client.read_env_file_key(str(tmp_path / "none.env")) == ""
    env.write_text('HF_HUB_OFFLINE="1"\n')
    assert vllm_client.read_env_file_key(str(env)) == ""
