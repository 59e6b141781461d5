# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""ray_drift_rows (plugins/module_utils/drift/ray.py): the rows roles/ray_cluster/tasks/drift.yml
publishes, from real `ray status` and `systemctl show` captures and results in the shape
Ansible registers them."""
import os

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.filter.drift import FilterModule

ray_drift_rows = FilterModule().filters()["ray_drift_rows"]

UNIT = "/etc/systemd/system/ray-worker.service"
EXPECTED = {"ray-head": {"GPU": 0}, "ray-worker": {"GPU": 0}}


def capture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as f:
        return f.read()


def data(**over):
    """A converged head (ray-head.service), everything as the inventory asks."""
    base = {
        "venv": "/opt/vllm/venv", "expected_version": "2.56.0",
        "found_version": {"rc": 0, "stdout": "2.56.0\n", "stderr": ""},
        "unit_path": "/etc/systemd/system/ray-head.service", "unit": {"changed": False}, "unit_exists": True,
        "other_unit_path": UNIT, "other_unit": {"changed": False},
        "service_name": "ray-head", "service": capture("drift", "systemctl-show-active.txt"),
        "service_state": "started",
        "is_head": True, "head_address": "127.0.0.2:26379", "expected": EXPECTED,
        "status": {"rc": 0, "stdout": capture("ray", "status_two_nodes.txt"), "stderr": ""},
    }
    base.update(over)
    return base


def keys(rows):
    return sorted((r["host"], r["component"], r["found"]) for r in rows)


def test_a_converged_node_has_no_rows():
    assert ray_drift_rows(data(), "ray-head") == []
    worker = data(service_name="ray-worker", unit_path=UNIT, is_head=False, status={"skipped": True})
    assert ray_drift_rows(worker, "ray-worker") == []


def test_other_ray_version_and_none_installed():
    rows = ray_drift_rows(data(found_version={"rc": 0, "stdout": "2.55.1\n"}), "ray-head")
    assert [(r["component"], r["path"], r["expected"], r["found"]) for r in rows] == [
        ("ray_version", "/opt/vllm/venv", "ray==2.56.0", "ray==2.55.1")]
    err = "importlib.metadata.PackageNotFoundError: No package metadata was found for ray"
    rows = ray_drift_rows(data(found_version={"rc": 1, "stdout": "", "stderr": "Traceback ...\n" + err}), "ray-head")
    assert keys(rows) == [("ray-head", "ray_version", "not installed")] and rows[0]["detail"] == [err]


def test_hand_edited_unit_shows_the_changed_lines_and_a_missing_one_is_missing():
    diff = [{"before": "[Service]\nRestartSec=5\n# drift test\n", "after": "[Service]\nRestartSec=5\n"}]
    rows = ray_drift_rows(data(unit={"changed": True, "diff": diff}), "ray-head")
    assert keys(rows) == [("ray-head", "ray_unit", "hand-edited (differs from the rendered template)")]
    assert rows[0]["detail"] == ["-# drift test"] and rows[0]["path"] == "/etc/systemd/system/ray-head.service"
    rows = ray_drift_rows(data(unit={"changed": True}, unit_exists=False), "ray-head")
    assert keys(rows) == [("ray-head", "ray_unit", "missing")]


def test_the_other_roles_unit_left_behind():
    rows = ray_drift_rows(data(other_unit={"changed": True}), "ray-head")
    assert [(r["component"], r["path"], r["expected"]) for r in rows] == [
        ("ray_unit", UNIT, "absent (this node runs ray-head.service)")]


def test_service_stopped_and_disabled_are_ray_service_rows():
    worker = data(service_name="ray-worker", is_head=False, service=capture("drift", "systemctl-show-stopped-disabled.txt"))
    rows = ray_drift_rows(worker, "ray-worker")
    assert sorted((r["component"], r["path"], r["expected"], r["found"]) for r in rows) == [
        ("ray_service", "ray-worker.service", "active", "inactive (dead)"),
        ("ray_service", "ray-worker.service", "enabled", "disabled")]
    # ray_service_state: stopped asks for an inactive unit (still enabled: the role always enables it)
    rows = ray_drift_rows(dict(worker, service_state="stopped"), "ray-worker")
    assert [(r["expected"], r["found"]) for r in rows] == [("enabled", "disabled")]


def test_the_head_names_the_node_missing_from_ray_status_as_the_rows_host():
    rows = ray_drift_rows(data(status={"rc": 0, "stdout": capture("ray", "status_worker_gone.txt")}), "ray-head")
    assert [(r["host"], r["component"], r["path"], r["expected"], r["found"]) for r in rows] == [
        ("ray-worker", "ray_membership", "ray cluster 127.0.0.2:26379", "joined (resource llmops_node_ray-worker)",
         "not in `ray status` on ray-head")]
    assert rows[0]["detail"][0].startswith("node ray-worker has not joined the Ray cluster")
    # only the head reads the membership
    assert ray_drift_rows(data(is_head=False, status={"rc": 0, "stdout": ""}), "ray-worker") == []


def test_ray_status_failing_names_every_node_and_the_error():
    rows = ray_drift_rows(data(status={"rc": 1, "stdout": "", "stderr": "ConnectionError: GCS not reachable"}),
                          "ray-head")
    assert [r["host"] for r in rows] == ["ray-head", "ray-worker"]
    assert rows[1]["detail"][-1] == "`ray status` failed on ray-head: ConnectionError: GCS not reachable"


def test_declared_totals_short_is_one_row_on_the_head():
    rows = ray_drift_rows(data(expected={"ray-head": {"CPU": 1}, "ray-worker": {"CPU": 4}}), "ray-head")
    assert [(r["host"], r["component"]) for r in rows] == [("ray-head", "ray_membership")]
    assert "CPU" in rows[0]["found"]


def test_never_converged_head_is_rows_not_a_crash():
    """The check step's nodes: no Ray in the venv, no unit file, systemd does not know the unit,
    `ray status` not read (the head's unit is not active)."""
    rows = ray_drift_rows(data(found_version={"rc": 1, "stdout": "", "stderr": "PackageNotFoundError: ray"},
                               unit={"changed": True, "diff": [{"before": "", "after": "[Unit]\n"}]},
                               unit_exists=False, service=capture("drift", "systemctl-show-not-found.txt"),
                               status={"skipped": True, "changed": False}), "ray-head")
    assert keys(rows) == [("ray-head", "ray_membership", "not read (ray-head.service is not active)"),
                          ("ray-head", "ray_service", "unit not found"),
                          ("ray-head", "ray_unit", "missing"),
                          ("ray-head", "ray_version", "not installed")]
    membership = [r for r in rows if r["component"] == "ray_membership"][0]
    assert membership["expected"] == "every node of the group joined (ray-head, ray-worker)"
    # with ray_service_state: stopped nothing is read on the head
    assert not [r for r in ray_drift_rows(data(service_state="stopped", status={"skipped": True}), "ray-head")
                if r["component"] == "ray_membership"]


def test_rows_have_the_shape_of_the_other_roles():
    rows = ray_drift_rows(data(found_version={"rc": 0, "stdout": "2.0.0"}, other_unit={"changed": True},
                               status={"rc": 0, "stdout": capture("ray", "status_worker_gone.txt")}), "ray-head")
    assert len(rows) == 3
    for r in rows:
        assert set(r) == {"host", "component", "instance", "path", "expected", "found", "detail"}
