# -*- coding: utf-8 -*-
"""A host without Python (issue 31): the playbooks' first play checks it with ONE raw command
before the first module, naming the host and the fix for its OS, instead of Ansible's generic
interpreter error. The probe command runs for real here (this machine's sh and /etc/os-release),
and playbooks/preflight.yml runs for real through ansible-playbook on localhost."""
import json
import os
import subprocess
import sys

from ansible_collections.llmops.serving.plugins.module_utils import host_python as H

from ansible_cli import ansible_env, ansible_tool
from collection_path import ROOT

FALLBACK = ["python3.13", "python3.12", "python3.11", "python3.10", "python3.9", "python3.8", "/usr/bin/python3",
            "python3"]


def sh(cmd, path=None):
    env = {"PATH": path} if path is not None else dict(os.environ)
    cp = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env=env, check=False)
    return {"rc": cp.returncode, "stdout": cp.stdout, "stderr": cp.stderr}


def os_ids():
    with open("/etc/os-release") as f:
        kv = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return [kv.get("ID", "").strip('"')] + kv.get("ID_LIKE", "").strip('"').split()


def test_this_machines_python_is_found_by_the_raw_command():
    r = sh(H.probe_command("", FALLBACK))
    assert r["rc"] == 0 and r["stdout"].startswith("PY=/"), r
    assert H.problem(r, "vm", "", FALLBACK) is None


def test_no_python_on_path_names_the_host_the_candidates_and_the_install_command_of_its_os():
    # /bin/sh with a PATH that holds no python (the probe's own builtins only): what a bare host answers.
    r = sh(H.probe_command("", ["python3.13", "python3"]), path="/nonexistent")
    assert "PY=" not in r["stdout"] and "OS=" in r["stdout"]
    msg = H.problem(r, "gpu-07", "", ["python3.13", "python3"])
    assert msg.startswith("host gpu-07 has no Python (none of python3.13, python3 found)")
    assert "ansible_python_interpreter for gpu-07" in msg
    if "debian" in os_ids():
        assert "`apt-get update && apt-get install -y python3`" in msg


def test_a_set_interpreter_that_is_not_there_names_the_variable():
    r = sh(H.probe_command("/opt/py/bin/python3", FALLBACK))
    msg = H.problem(r, "gpu-07", "/opt/py/bin/python3", FALLBACK)
    assert "ansible_python_interpreter=/opt/py/bin/python3 is not on the host" in msg


def test_an_old_python_and_other_oses():
    msg = H.problem({"rc": 0, "stdout": "PY=/usr/bin/python3 3.6\nOS=rocky rhel centos fedora\n"}, "old", "", FALLBACK)
    assert "Python 3.6" in msg and "3.8 or newer" in msg and "`dnf install -y python3`" in msg
    msg = H.problem({"rc": 0, "stdout": "OS=alpine \n"}, "a", "", FALLBACK)
    assert "`apk add python3`" in msg


def _playbook(path, interpreter, check=False):
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    argv = [ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", path,
            "-e", json.dumps({"ansible_python_interpreter": interpreter})] + (["--check"] if check else [])
    cp = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return cp.returncode, json.loads(cp.stdout)


def test_preflight_playbook_refuses_a_host_without_python_before_any_module():
    rc, out = _playbook(os.path.join(ROOT, "playbooks", "preflight.yml"), "/nonexistent/bin/python3")
    assert rc == 2
    tasks = out["plays"][0]["tasks"]
    failed = [t for t in tasks if t["hosts"]["localhost"].get("failed")]
    assert len(failed) == 1, [t["task"]["name"] for t in tasks]
    msg = failed[0]["hosts"]["localhost"]["msg"]
    assert msg.startswith("host localhost: ansible_python_interpreter=/nonexistent/bin/python3 is not on the host")
    assert msg.endswith("Nothing was changed.")
    # Only the raw command ran on the host before the failure.
    ran = [t["task"]["name"] for t in tasks if not t["hosts"]["localhost"].get("skipped")]
    assert ran[0] == "Find the Python Ansible uses on the host (one raw command)"


def test_the_check_changes_nothing_and_runs_in_check_mode(tmp_path):
    play = tmp_path / "p.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.import_tasks: %s\n"
                    "    - ansible.builtin.import_tasks: %s\n"
                    % (os.path.join(ROOT, "playbooks", "tasks", "python_check.yml"),
                       os.path.join(ROOT, "playbooks", "tasks", "python_check.yml")))
    for check in (False, True):
        rc, out = _playbook(str(play), sys.executable, check=check)
        assert rc == 0
        stats = out["stats"]["localhost"]
        assert stats["changed"] == 0 and stats["failures"] == 0
        results = [t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]]
        assert results[0]["stdout"].startswith("PY=/")  # the raw command ran, in check mode too
        # Once per host and run: the second import is skipped.
        assert all(r.get("skipped") for r in results[3:])
