# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The vLLM deploy reads where users look (issue 30 item 2): playbooks/vllm.yml
shows plan -> drain -> restart and readiness -> undrain -> start the rest ->
finish -> report, with the rollback and the undrain in its rescue; the
vllm_service role includes no other role but gpu_preflight's GPU facts and its own parts (the gateway's
drain is the playbook's step, as kubespray's upgrade playbook shows drain/uncordon). The parts
(vllm_install, vllm_watchdog, vllm_compile_cache, vllm_rollback: roles of their own with internal
inputs, the way prometheus-community/ansible's roles/_common is called) are called by vllm_service
only, and vllm_service stays at most 50 tasks (issue 30)."""
import glob
import os
import re

import yaml

from conftest import ROOT
from test_role_entry_points import _role_calls

TASKS = os.path.join(ROOT, "roles", "vllm_service", "tasks")


def _steps(tasks, section=""):
    """(section, 'role:entry point' or 'tasks:file' or module) of each task, blocks flattened."""
    for task in tasks or []:
        if "block" in task:
            yield from _steps(task["block"], section or "block")
            yield from _steps(task.get("rescue"), "rescue")
            yield from _steps(task.get("always"), "always")
            continue
        for key, value in task.items():
            short = key.split(".")[-1]
            if short in ("include_role", "import_role"):
                yield section, "%s:%s" % (value["name"].split(".")[-1], value.get("tasks_from", "main"))
            elif short in ("include_tasks", "import_tasks"):
                yield section, "tasks:" + os.path.basename(value if isinstance(value, str) else value["file"])
            elif short in ("debug", "assert"):
                yield section, short


def _deploy_play():
    with open(os.path.join(ROOT, "playbooks", "vllm.yml")) as f:
        plays = yaml.safe_load(f)
    return [p for p in plays if p.get("name", "").startswith("Deploy vLLM")][0]


def test_the_deploy_play_shows_the_flow_in_order():
    steps = list(_steps(_deploy_play()["tasks"]))
    assert steps == [
        ("", "vllm_service:prepare"),
        ("block", "vllm_service:start"),
        ("block", "tasks:vllm_restart.yml"),
        ("block", "vllm_service:apply"),
        ("rescue", "vllm_service:rollback"),
        ("always", "gateway:ready"),
        ("", "vllm_service:finish"),
        ("", "debug"),
    ], steps
    with open(os.path.join(ROOT, "playbooks", "tasks", "vllm_restart.yml")) as f:
        one = list(_steps(yaml.safe_load(f)))
    assert one == [("", "gateway:drain"), ("", "vllm_service:restart"), ("", "gateway:ready")], one


# The GPU facts the preflight reads when the play has none (gpu_preflight's own entry point),
# and the parts of the service, each called with its internal inputs.
PARTS = {"vllm_install": {"main", "prune"}, "vllm_watchdog": {"main", "agent"},
         "vllm_compile_cache": {"main", "collect"}, "vllm_rollback": {"main", "snapshot"}}
ALLOWED = {"gpu_preflight:gpu_info"} | set("%s:%s" % (r, e) for r, entries in PARTS.items() for e in entries)


def test_the_vllm_service_role_includes_no_other_role():
    others = []
    for path in sorted(glob.glob(os.path.join(TASKS, "*.yml"))):
        with open(path) as f:
            for section, step in _steps(yaml.safe_load(f)):
                if ":" in step and not step.startswith(("tasks:", "vllm_service:")) and step not in ALLOWED:
                    others.append("%s (%s): %s" % (os.path.basename(path), section or "task", step))
    assert others == [], "vllm_service includes other roles (their steps belong in the playbook):\n" + "\n".join(others)


def _callers(role):
    """(file, 'role:entry point') of every call of ``role``: test_role_entry_points' _role_calls (every
    include_role / import_role / roles: entry with tasks_from), and every reference to the role by name in a
    task or play of roles/, playbooks/, site.yml, molecule/ (a call without tasks_from shows up as 'ROLE:?')."""
    fqcn = "llmops.serving." + role
    calls = [(f, "%s:%s" % (role, t.replace(".yml", ""))) for f, name, t in _role_calls() if name == fqcn]
    named = re.compile(r"^\s*-?\s*(?:name|role): %s\s*$" % re.escape(fqcn), re.M)
    files = (glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "**", "*.yml"),
                                                                                       recursive=True)
             + glob.glob(os.path.join(ROOT, "molecule", "**", "*.yml"), recursive=True) + [os.path.join(ROOT, "site.yml")])
    for path in sorted(files):
        with open(path) as f:
            refs = len(named.findall(f.read()))
        rel = os.path.relpath(path, ROOT)
        calls += [(rel, "%s:?" % role)] * (refs - sum(1 for c in calls if c[0] == rel))
    return calls


def test_the_parts_of_the_service_are_called_by_vllm_service_only():
    for role, entries in PARTS.items():
        calls = _callers(role)
        assert calls, role
        others = [c for c in calls if not c[0].startswith("roles/vllm_service/tasks/")]
        assert others == [], "%s is a part of vllm_service; call vllm_service's entry points instead: %s" % (role, others)
        assert set(step.split(":")[1] for f, step in calls) == entries, (role, calls)


def test_vllm_service_is_at_most_50_tasks():
    import importlib.util
    spec = importlib.util.spec_from_file_location("structure_figures", os.path.join(ROOT, "scripts", "structure-figures.py"))
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    roles = figures.collect(ROOT)["roles"]
    assert roles["vllm_service"]["tasks"] <= 50, roles["vllm_service"]
    for role in PARTS:
        assert roles[role]["tasks"] <= 40, (role, roles[role])
