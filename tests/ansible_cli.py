"""The ansible CLIs as the tests run them (on tests/ via the conftests' sys.path):
the repo's ansible.cfg, the staged collection, the tools venv's tools."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig

from collection_path import ROOT


def ansible_tool(name):
    """Path of an ansible CLI (ansible-playbook, ansible-doc, ...): the one
    beside this Python (the tools venv, also when its bin/ is not on PATH),
    else PATH. Fails instead of skipping: the tests need it."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    exe = here if os.access(here, os.X_OK) else shutil.which(name)
    assert exe, "%s not found beside %s nor on PATH: run `make venv`" % (name, sys.executable)
    return exe


def ansible_env():
    """Environment for ansible CLIs run from the tests: the repo's ansible.cfg
    and the staged collection + the tools venv's bundled collections."""
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(
        [os.path.join(ROOT, ".cache", "collections"), sysconfig.get_paths()["purelib"]])
    env["ANSIBLE_HOME"] = os.path.join(ROOT, ".cache", "ansible-home")
    return env


def run_module(module, args, check=False, timeout=120):
    """Run a collection module on localhost through the `ansible` CLI (its own
    interpreter: this Python; --check when check) and return its result (json callback)."""
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    argv = [ansible_tool("ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m",
            "llmops.serving." + module, "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert out.stdout.strip(), out.stderr[-2000:]
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def run_tasks(tmp_path, tasks):
    """One ansible-playbook run of ``tasks`` on localhost (this Python); the result of each task, in order."""
    import yaml  # pylint: disable=import-outside-toplevel
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return [t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]]
