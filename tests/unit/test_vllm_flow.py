# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The vLLM deploy reads where users look (issue 30 item 2): playbooks/vllm.yml
shows plan -> drain -> restart and readiness -> undrain -> start the rest ->
finish -> report, with the rollback and the undrain in its rescue; the
vllm_service role includes no other role but gpu_preflight's GPU facts (the gateway's drain is the
playbook's step, as kubespray's upgrade playbook shows drain/uncordon)."""
import glob
import os

import yaml

from conftest import ROOT

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


# The GPU facts the preflight reads when the play has none (gpu_preflight's own entry point).
ALLOWED = {"gpu_preflight:gpu_info"}


def test_the_vllm_service_role_includes_no_other_role():
    others = []
    for path in sorted(glob.glob(os.path.join(TASKS, "*.yml"))):
        with open(path) as f:
            for section, step in _steps(yaml.safe_load(f)):
                if ":" in step and not step.startswith(("tasks:", "vllm_service:")) and step not in ALLOWED:
                    others.append("%s (%s): %s" % (os.path.basename(path), section or "task", step))
    assert others == [], "vllm_service includes other roles (their steps belong in the playbook):\n" + "\n".join(others)
