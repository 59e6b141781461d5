# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Every task of the vllm_service role's main flow that writes to the host is
gated, so that a no-op run skips it without a host round trip: its `when` asks
the host state (vllm_service's prepare.yml reads it once, llmops.serving.vllm_host_state,
and hands it to its parts vllm_install and vllm_watchdog) or a fact derived from it, or a change of this run; or its loop is empty on a no-op run
(the restart list, the stale instances). A write task added without a gate (or
a gate removed) fails here, naming the task. The behaviour of a gated task on a
drifted host is tested live (molecule/vllm_service: idempotence, check --diff).
"""
import os

import yaml

from conftest import ROOT

ROLES = os.path.join(ROOT, "roles")
TASKS = os.path.join(ROLES, "vllm_service", "tasks")
# The main flow's phases (vllm_service's tasks/main.yml) and the parts of the
# service it runs on every run (vllm_install's install and venv, vllm_watchdog's
# timers and gateway agent); restart/rollback/snapshot/prune only run on a
# change (their include is gated: checked here too).
FILES = ["vllm_service/main.yml", "vllm_service/prepare.yml", "vllm_service/start.yml", "vllm_service/apply.yml",
         "vllm_service/finish.yml", "vllm_install/main.yml", "vllm_install/venv.yml", "vllm_watchdog/main.yml",
         "vllm_watchdog/agent.yml"]
WRITERS = {"apt", "group", "user", "file", "copy", "template", "pip", "file_set", "systemd_service",
           "command", "shell", "vllm_tiny_model", "include_tasks", "include_role"}
# A `when` naming one of these skips the task on a no-op run.
GATES = ("_vllm_state", "_vllm_install_host_state", "_vllm_watchdog_host_state", "vllm_plan.", "_vllm_found",
         "_vllm_pip is changed", "_vllm_pip is not skipped", "_vllm_venv_moved", "_vllm_venv_done", "_vllm_watchdog_files is changed", "_vllm_legacy_dir",
         "_vllm_venv_new", "ansible_check_mode and _vllm_pip is changed", "_vllm_agent_left")
# Loops that are empty on a no-op run (the plan's lists: module_utils/vllm_plan.py).
EMPTY_LOOPS = ("vllm_plan.restart", "vllm_plan.remove", "vllm_plan.reset_failed", "vllm_plan.ready")
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


def _host_state_gate(task):
    """llmops.serving.file_set given the host state: its action plugin ends the task on
    the controller when the host holds every entry (plugins/action/file_set.py)."""
    args = task.get("llmops.serving.file_set")
    return isinstance(args, dict) and any(
        s in str(args.get("host_state", ""))
        for s in ("_vllm_state.files", "_vllm_install_host_state.files", "_vllm_watchdog_host_state.files"))


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
        with open(os.path.join(ROLES, name.replace("/", "/tasks/"))) as f:
            tasks = yaml.safe_load(f)
        for task, when in _walk(tasks):
            module = _module(task)
            if not module or when.strip() == "rescue" or "rescue" in when.split():
                continue
            loop = str(task.get("loop", ""))
            when = when + " " + str(task.get("vars", ""))  # a gate may read the state through a task var
            gated = any(g in when for g in GATES) or any(g in loop for g in EMPTY_LOOPS) or _host_state_gate(task)
            if task.get("name") in NOT_GATED:
                seen.add(task["name"])
                continue
            # A read (changed_when: false) run on every no-op is a round trip too: it must be gated as well.
            if not gated:
                ungated.append("%s: %s (%s)" % (name, task.get("name"), module))
    assert not ungated, "write tasks a no-op run still executes (gate them on the host state):\n" + "\n".join(ungated)
    assert seen == set(NOT_GATED), "NOT_GATED lists tasks that no longer exist: %s" % (set(NOT_GATED) - seen)


# The plan's lists and flags that make its has_work true (module_utils/vllm_plan.py;
# tests/unit/plugins/module_utils/test_vllm_plan.py shows each one opens the gate).
RUN_WORK_TERMS = ("vllm_plan.restart", "vllm_plan.apply", "vllm_plan.ready", "vllm_plan.snapshot_left",
                  "vllm_plan.venv_link_stale", "vllm_plan.remove", "vllm_plan.reset_failed", "vllm_plan.drain")
# Conditions of the run phase that are not the plan's: check mode, and the
# check-mode preview's "systemd can read this unit" (a never-converged host).
# The compile cache's collection (finish.yml) is a setting of the fleet, not a change.
NOT_PLAN = ("ansible_check_mode", "not ansible_check_mode", "_vllm_state.files[_vllm_unit_path].exists",
            "_vllm_state.files[item.dropin_path].exists | default(false)", "vllm_compile_cache_share | bool")
RUN_PHASE = ("main.yml", "start.yml", "restart.yml", "apply.yml", "finish.yml", "rollback.yml")


def _clauses(tasks):
    """(task name, clause) of every `when` clause and loop of ``tasks``, blocks and rescues included."""
    for task in tasks or []:
        when = task.get("when", [])
        for clause in (when if isinstance(when, list) else [when]):
            yield task.get("name"), str(clause)
        if "loop" in task:
            yield task.get("name"), "loop: " + str(task["loop"])
        for key in ("block", "rescue", "always"):
            yield from _clauses(task.get(key))


def test_every_write_task_of_the_run_phase_is_gated_by_a_term_of_the_run_phase_gate():
    """A task added to the run phase whose work the plan's has_work does not see would be
    skipped on a run that has only that work (the role alone and playbooks/vllm.yml both
    skip the phase when has_work is false): each write task's when/loop names a term of it,
    and restart.yml runs only in a loop over the plan's restart list."""
    ungated = []
    for name in ("start.yml", "apply.yml"):
        with open(os.path.join(TASKS, name)) as f:
            tasks = yaml.safe_load(f)
        for task, when in _walk(tasks):
            if not _module(task) or "rescue" in when.split():
                continue
            text = when + " " + str(task.get("loop", ""))
            if not any(t in text for t in RUN_WORK_TERMS):
                ungated.append("%s: %s" % (name, task.get("name")))
    assert ungated == [], "run-phase tasks whose work the plan's has_work does not see: %s" % ungated
    callers = []
    for path in (os.path.join(TASKS, "main.yml"), os.path.join(ROOT, "playbooks", "vllm.yml")):
        with open(path) as f:
            doc = yaml.safe_load(f)
        plays = [p for p in doc if "hosts" in p] or [{"tasks": doc}]
        for play in plays:
            for task, clause in _clauses(play.get("tasks")):
                callers.append((os.path.basename(path), task, clause))
    loops = [c for c in callers if c[2].startswith("loop: ") and "vllm_plan.restart" in c[2]]
    assert sorted(c[0] for c in loops) == ["main.yml", "vllm.yml"], callers


def test_the_run_phase_decides_nothing_the_plan_did_not_say():
    """Every condition and loop of the run phase reads the plan (vllm_plan), or is check
    mode: what restarts, drains, starts, is waited for or removed is decided once, in
    module_utils/vllm_plan.py, not again in a `when`."""
    own = []
    for name in RUN_PHASE:
        with open(os.path.join(TASKS, name)) as f:
            tasks = yaml.safe_load(f)
        for task, clause in _clauses(tasks):
            if clause.startswith("loop: ") and "vllm_plan." not in clause and "vllm_view" in clause:
                continue  # a loop over the instances, gated by its `when` (checked as a clause)
            if "vllm_plan." not in clause and clause.strip() not in NOT_PLAN:
                own.append("%s: %s: %s" % (name, task, clause))
    assert own == [], "run-phase decisions outside the plan:\n" + "\n".join(own)


# The one write that keeps a gate of its own, with the reason (docs/vllm_service.md).
OWN_GATES = {"Mark the versioned venv finished (what it holds; pruning and clones skip unfinished ones)":
             "a template: before ansible-core 2.19 a templated JSON value turns into a dict in a module argument"}


def test_the_write_gate_is_one_mechanism():
    """No write task compares the host state with what it would write in a `when` of its
    own: file_set does it on the controller (host_state) and the change plan does it for
    the unit, drop-ins and env files."""
    own, seen = [], set()
    for name in sorted(os.path.join(r, "tasks", n) for r in os.listdir(ROLES) if r.startswith("vllm_")
                       for n in os.listdir(os.path.join(ROLES, r, "tasks"))):
        with open(os.path.join(ROLES, name)) as f:
            tasks = yaml.safe_load(f)
        for task, when in _walk(tasks):
            if "vllm_file_same" in when or "vllm_file_set_same" in when:
                if task.get("name") in OWN_GATES:
                    seen.add(task["name"])
                    continue
                own.append("%s: %s" % (name, task.get("name")))
    assert own == [], "write tasks with a gate of their own (use file_set's host_state or the plan):\n" + "\n".join(own)
    assert seen == set(OWN_GATES)
