"""Make the repo importable as ``ansible_collections.llmops.serving``
(tests/collection_path.py) and name the paths the tests use."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collection_path import ROOT  # noqa: E402,F401  pylint: disable=wrong-import-position

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def ansible_tool(name):
    """Path of an ansible CLI (ansible-playbook, ansible-doc, ...): the one
    beside this Python (the tools venv, also when its bin/ is not on PATH),
    else PATH. Fails instead of skipping: the tests need it."""
    import shutil  # pylint: disable=import-outside-toplevel
    here = os.path.join(os.path.dirname(sys.executable), name)
    exe = here if os.access(here, os.X_OK) else shutil.which(name)
    assert exe, "%s not found beside %s nor on PATH: run `make venv`" % (name, sys.executable)
    return exe


def ansible_env():
    """Environment for ansible CLIs run from the tests: the repo's ansible.cfg
    and the staged collection + the tools venv's bundled collections."""
    import sysconfig  # pylint: disable=import-outside-toplevel
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(
        [os.path.join(ROOT, ".cache", "collections"), sysconfig.get_paths()["purelib"]])
    env["ANSIBLE_HOME"] = os.path.join(ROOT, ".cache", "ansible-home")
    return env


def run_module_check(module, args):
    """Run a collection module on localhost through the `ansible` CLI in check mode
    (its own interpreter: this Python) and return its result (json callback)."""
    import json  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    out = subprocess.run([ansible_tool("ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m",
                          "llmops.serving." + module, "-a", json.dumps(args), "--check"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip(), out.stderr[-2000:]
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


class _SpecCaptured(Exception):
    pass


def module_argument_spec(mod):
    """The argument_spec a module's main() passes to AnsibleModule (main() stops there)."""
    seen = {}

    class Fake(object):
        def __init__(self, argument_spec, **kwargs):
            seen.update(argument_spec)
            raise _SpecCaptured()
    orig = mod.AnsibleModule
    mod.AnsibleModule = Fake
    try:
        mod.main()
    except _SpecCaptured:
        pass
    finally:
        mod.AnsibleModule = orig
    return seen
