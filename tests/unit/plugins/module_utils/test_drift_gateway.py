"""Drift rows of the gateway role (plugins/module_utils/drift/gateway.py)."""
from ansible_collections.llmops.serving.plugins.module_utils.drift import gateway as dg


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


def test_a_hand_edited_or_missing_hold_action_is_named():
    base = {"installed": True, "config_path": "/c", "config": {"changed": False}, "dropin_path": "/d",
            "dropin": {"changed": False}, "models_path": "/m", "models": {"changed": False}, "keys_path": "/k",
            "keys_changed": False, "hold_path": "/etc/haproxy/llmops/hold.lua", "service": None}
    edited = dg.gateway_rows("gw", dict(base, hold={"changed": True, "diff": {
        "before": "local STEP_MS = 1000\n", "after": "local STEP_MS = 200\n"}},
        file_stats={"/etc/haproxy/llmops/hold.lua": True}))
    assert [(r["component"], r["path"], r["detail"]) for r in edited] == [
        ("gateway_hold_lua", "/etc/haproxy/llmops/hold.lua", ["-local STEP_MS = 1000", "+local STEP_MS = 200"])]
    missing = dg.gateway_rows("gw", dict(base, hold={"changed": True}, file_stats={"/etc/haproxy/llmops/hold.lua": False}))
    assert [(r["component"], r["found"]) for r in missing] == [("gateway_hold_lua", "missing")]
    assert dg.gateway_rows("gw", dict(base, hold={"changed": False}, file_stats={})) == []


def test_a_hand_edited_or_missing_usage_counter_is_named():
    base = {"installed": True, "config_path": "/etc/haproxy/haproxy.cfg", "config": {"changed": False},
            "keys_changed": False, "usage_path": "/etc/haproxy/llmops/usage.lua", "service": None}
    missing = dg.gateway_rows("gw", dict(base, usage={"changed": True},
                                         file_stats={"/etc/haproxy/llmops/usage.lua": False}))
    assert [(r["component"], r["found"]) for r in missing] == [("gateway_usage_lua", "missing")]
    assert dg.gateway_rows("gw", dict(base, usage={"changed": False}, file_stats={})) == []
