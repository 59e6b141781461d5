# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Every task of the vllm_service role's main flow that writes to the host is
gated, so that a no-op run skips it without a host round trip: its `when` asks
the host state (tasks/state.yml, llmops.serving.vllm_host_state) or a fact
derived from it, or a change of this run; or its loop is empty on a no-op run
(the restart list, the stale instances). A write task added without a gate (or
a gate removed) fails here, naming the task. The behaviour of a gated task on a
drifted host is tested live (molecule/vllm_service: idempotence, check --diff).
"""
import json
import os
import subprocess

import yaml

from conftest import ROOT, ansible_env, ansible_tool

TASKS = os.path.join(ROOT, "roles", "vllm_service", "tasks")
# The main flow's phases (tasks/main.yml); restart/rollback/snapshot/prune/venv
# only run on a change (their include is gated: checked here too).
FILES = ["install.yml", "venv.yml", "model.yml", "configure.yml", "run.yml", "run_changes.yml", "watchdog.yml", "agent.yml"]
WRITERS = {"apt", "group", "user", "file", "copy", "template", "pip", "file_set", "systemd_service",
           "command", "shell", "vllm_tiny_model", "include_tasks", "include_role"}
# A `when` naming one of these skips the task on a no-op run.
GATES = ("_vllm_state", "_vllm_files_same", "_vllm_unit_will_change", "_vllm_units_to_apply",
         "_vllm_found", "_vllm_pip is changed", "_vllm_pip is not skipped", "_vllm_venv_moved", "_vllm_venv_done",
         "_vllm_watchdog_files is changed", "_vllm_restart_list", "_vllm_legacy_dir", "_vllm_venv_new",
         "ansible_check_mode and _vllm_pip is changed", "_vllm_run_has_work", "_vllm_snapshot_left",
         "_vllm_venv_link_stale", "_vllm_agent_left")
# Loops that are empty on a no-op run.
EMPTY_LOOPS = ("_vllm_restart_list", "_vllm_state.stale_instances", "_vllm_readiness_instances")
# Not gated yet, with the reason (a line that is no longer needed fails too).
NOT_GATED = {
    "Set up the versioned venv (adopt the pre-versioning venv, or clone one of the same vLLM version)":
        "an include (no round trip); venv.yml's own tasks are checked here",
}


def _module(task):
    for key in task:
        short = key.split(".")[-1]
        if short in WRITERS:
            return short
    return None


def _walk(tasks, inherited=""):
    for task in tasks or []:
        when = task.get("when", "")
        when = " ".join(when) if isinstance(when, list) else str(when)
        if "block" in task:
            yield from _walk(task["block"], inherited + " " + when)
            yield from _walk(task.get("rescue"), "rescue")
            yield from _walk(task.get("always"), "rescue")
            continue
        yield task, inherited + " " + when


def test_every_write_task_of_the_main_flow_is_gated():
    ungated, seen = [], set()
    for name in FILES:
        with open(os.path.join(TASKS, name)) as f:
            tasks = yaml.safe_load(f)
        for task, when in _walk(tasks):
            module = _module(task)
            if not module or when.strip() == "rescue" or "rescue" in when.split():
                continue
            loop = str(task.get("loop", ""))
            when = when + " " + str(task.get("vars", ""))  # a gate may read the state through a task var
            gated = any(g in when for g in GATES) or any(g in loop for g in EMPTY_LOOPS)
            if task.get("name") in NOT_GATED:
                seen.add(task["name"])
                continue
            # A read (changed_when: false) run on every no-op is a round trip too: it must be gated as well.
            if not gated:
                ungated.append("%s: %s (%s)" % (name, task.get("name"), module))
    assert not ungated, "write tasks a no-op run still executes (gate them on the host state):\n" + "\n".join(ungated)
    assert seen == set(NOT_GATED), "NOT_GATED lists tasks that no longer exist: %s" % (set(NOT_GATED) - seen)


def _readiness_names(tmp_path, **extra):
    """The instances the readiness gate waits for (roles/vllm_service/vars/main.yml's
    _vllm_readiness_instances), rendered by Ansible for a host state of four instances:
    a active and untouched, b activating (after a reboot), c active but restarted by
    this run, d active and headless (serves no HTTP)."""
    view = [{"name": n, "unit": "vllm@%s.service" % n, "serves_http": n != "d"} for n in "abcd"]
    units = {"vllm@a.service": {"active_state": "active", "unit_file_state": "enabled"},
             "vllm@b.service": {"active_state": "activating", "unit_file_state": "enabled"},
             "vllm@c.service": {"active_state": "active", "unit_file_state": "enabled"},
             "vllm@d.service": {"active_state": "active", "unit_file_state": "enabled"}}
    variables = dict({"vllm_view": view, "_vllm_state": {"units": units}, "_vllm_restart_list": ["c"],
                      "vllm_service_enabled": True, "vllm_service_state": "started",
                      "vllm_readiness_check_unchanged": False}, **extra)
    return _render(tmp_path, "{{ _vllm_readiness_instances | map(attribute='name') | list }}", variables)


def test_readiness_waits_for_what_this_run_started_or_found_not_active(tmp_path):
    """A no-op run does not probe an instance that was active and that it left alone;
    one still activating (a re-run after a reboot) and one it restarted are waited for."""
    assert _readiness_names(tmp_path) == ["b", "c"]
    assert _readiness_names(tmp_path, vllm_readiness_check_unchanged=True) == ["a", "b", "c"]


def _render(tmp_path, expr, variables):
    """``expr`` rendered by Ansible with roles/vllm_service/vars/main.yml and ``variables``."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [os.path.join(ROOT, "roles", "vllm_service", "vars", "main.yml")],
             "tasks": [{"ansible.builtin.debug": {"msg": expr}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "@" + str(tmp_path / "vars.json"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]


def test_run_phase_gate_is_closed_on_a_noop_and_opens_for_each_kind_of_work(tmp_path):
    """tasks/run.yml includes run_changes.yml only when _vllm_run_has_work: false for
    a converged host left alone, true for each kind of work its tasks do."""
    noop = {"vllm_view": [{"name": "a", "unit": "vllm@a.service", "serves_http": True}],
            "_vllm_state": {"units": {"vllm@a.service": {"active_state": "active", "unit_file_state": "enabled"}},
                            "files": {"/var/lib/vllm/rollback": {"exists": False},
                                      "/opt/vllm/venv": {"exists": True, "lnk_source": "/opt/vllm/venvs/v1"}},
                            "stale_instances": []},
            "_vllm_restart_list": [], "vllm_service_enabled": True, "vllm_service_state": "started",
            "vllm_readiness_check": True, "vllm_readiness_check_unchanged": False,
            "vllm_rollback_dir": "/var/lib/vllm/rollback", "vllm_venv": "/opt/vllm/venv",
            "vllm_venv_versioned": True, "_vllm_venv_path": "/opt/vllm/venvs/v1"}
    cases = {
        "noop": {},
        "restart": {"_vllm_restart_list": ["a"]},
        "not_active": {"_vllm_state": dict(noop["_vllm_state"], units={
            "vllm@a.service": {"active_state": "failed", "unit_file_state": "enabled"}})},
        "stop_asked": {"vllm_service_state": "stopped"},
        "snapshot_left": {"_vllm_state": dict(noop["_vllm_state"], files=dict(
            noop["_vllm_state"]["files"], **{"/var/lib/vllm/rollback": {"exists": True}}))},
        "venv_switch": {"_vllm_venv_path": "/opt/vllm/venvs/v2"},
        "removed": {"_vllm_state": dict(noop["_vllm_state"], stale_instances=["old"])},
        "probe_all": {"vllm_readiness_check_unchanged": True},
    }
    got = {case: _render(tmp_path, "{{ _vllm_run_has_work | bool }}", dict(noop, **extra))
           for case, extra in cases.items()}
    assert got == {case: case != "noop" for case in cases}, got


# The terms of vars/main.yml's _vllm_run_has_work, one per kind of work in run_changes.yml.
RUN_WORK_TERMS = ("_vllm_restart_list", "_vllm_units_to_apply", "_vllm_readiness_instances", "_vllm_snapshot_left",
                  "_vllm_venv_link_stale", "_vllm_state.stale_instances")


def test_every_write_task_of_run_changes_is_gated_by_a_term_of_the_run_phase_gate():
    """A task added to run_changes.yml whose work the gate does not see would be skipped on a
    run that has only that work: each write task's when/loop names a term of _vllm_run_has_work,
    and the gate names every term."""
    with open(os.path.join(ROOT, "roles", "vllm_service", "vars", "main.yml")) as f:
        gate = yaml.safe_load(f)["_vllm_run_has_work"]
    assert [t for t in RUN_WORK_TERMS if t not in gate] == []
    with open(os.path.join(TASKS, "run_changes.yml")) as f:
        tasks = yaml.safe_load(f)
    ungated = []
    for task, when in _walk(tasks):
        if not _module(task) or "rescue" in when.split():
            continue
        text = when + " " + str(task.get("loop", ""))
        if not any(t in text for t in RUN_WORK_TERMS):
            ungated.append(task.get("name"))
    assert ungated == [], "run_changes.yml tasks whose work _vllm_run_has_work does not see: %s" % ungated
