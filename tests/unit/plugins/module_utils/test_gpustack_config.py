"""gpustack_config: key set from the REAL `gpustack start --help` capture of 2.3.0."""
import os

import yaml

from ansible_collections.llmops.serving.plugins.module_utils import gpustack_config as gc

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "gpustack")


def _help():
    with open(os.path.join(FIX, "gpustack-start-help.txt")) as fh:
        return fh.read()


def schema():
    return gc.schema_from_help(_help())


def test_help_parses_all_options():
    keys = gc.parse_start_help(_help())
    assert len(keys) == 100  # 102 options minus --help and --config-file
    for k in ("data_dir", "port", "api_port", "token", "server_url", "worker_ip", "worker_name",
              "system_reserved", "database_url", "bootstrap_password", "gateway_mode", "debug"):
        assert k in keys, k
    assert "config_file" not in keys and "help" not in keys
    assert keys["api_port"]["type"] == "int"
    assert keys["disable_update_check"]["type"] == "bool"
    assert keys["gateway_mode"]["choices"] == ["auto", "embedded", "incluster", "external", "disabled"]


def test_role_vars_are_generated_from_the_capture():
    with open(os.path.join(ROOT, "roles", "gpustack", "vars", "main.yml")) as fh:
        stored = yaml.safe_load(fh)
    assert stored["gpustack_config_schema"] == schema()
    assert stored["gpustack_config_schema_version"] == "2.3.0"


def test_real_server_config_capture_is_valid_except_the_unknown_keys():
    with open(os.path.join(FIX, "gs-server-config.yaml")) as fh:
        cfg = yaml.safe_load(fh)
    errors = gc.validate_config(cfg, schema())
    assert len(errors) == 2
    assert "--gpu-memory-utilization" in errors[0] and "'memory_overcommit'" in errors[0]
    assert "unknown GPUStack config key 'totally-bogus-key'" in errors[1]
    del cfg["memory_overcommit"], cfg["totally-bogus-key"]
    assert gc.validate_config(cfg, schema()) == []


def test_real_worker_config_capture_is_valid():
    with open(os.path.join(FIX, "gs-worker-config.yaml")) as fh:
        cfg = yaml.safe_load(fh)
    assert gc.validate_config(cfg, schema()) == []


def test_seed_keys_name_the_real_levers():
    seed = {"resources": {"gpu": {"memory_utilization": 0.9, "memory_overcommit": False}},
            "memory_allocation_granularity": 1024}
    errors = gc.validate_config(seed, schema())
    text = " ".join(errors)
    assert "'resources.gpu.memory_utilization'" in text
    assert "'resources.gpu.memory_overcommit'" in text
    assert "'memory_allocation_granularity'" in text
    assert all("--gpu-memory-utilization" in e and "gpu_selector" in e and "system_reserved" in e for e in errors)


def test_bad_enum_and_type_from_the_real_error_captures():
    # gs-bad-config-enum.yaml / gs-bad-config-type.yaml made gpustack 2.3.0 exit 1
    for name, expect in (("gs-bad-config-enum.yaml", "gateway_mode must be one of"),
                         ("gs-bad-config-type.yaml", "api_port must be an integer")):
        with open(os.path.join(FIX, name)) as fh:
            cfg = yaml.safe_load(fh)
        errors = gc.validate_config(cfg, schema())
        assert len(errors) == 1 and expect in errors[0], errors
    errors = gc.validate_config({"gateway_mode": "in-cluster"}, schema())
    assert "'incluster'" in errors[0]


def test_types():
    s = schema()
    assert gc.validate_config({"api_port": "18081", "disable_update_check": True}, s) == []
    assert "boolean" in gc.validate_config({"disable_update_check": "yes"}, s)[0]
    assert "mapping" in gc.validate_config({"system_reserved": "2"}, s)[0]
    assert "unknown key 'gpu'" in gc.validate_config({"system_reserved": {"gpu": 1}}, s)[0]
    assert gc.validate_config({"system_reserved": {"ram": 2, "vram": 1}}, s) == []
    assert "N1-N2" not in gc.validate_config({"service_port_range": "40000-40063"}, s)
    assert gc.validate_config({"service_port_range": "40000:40063"}, s)
    assert "snake_case" in gc.validate_config({"api-port": 1}, s)[0]
    assert gc.validate_config(["x"], s)


def test_diff_schema():
    s = schema()
    assert gc.diff_schema(s, list(s) + ["host"]) == ([], ["host"])
    assert gc.diff_schema(s, [k for k in s if k != "port"]) == (["port"], [])


def test_gateway_mode_error_names_the_role_variable():
    errors = gc.validate_config({"gateway_mode": "sidecar"}, schema())
    assert "gpustack_gateway_mode" in errors[0], errors
