"""Make the repo importable as ``ansible_collections.llmops.serving``
(tests/collection_path.py) and name the paths the tests use."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collection_path import ROOT  # noqa: E402,F401  pylint: disable=wrong-import-position
# The ansible CLIs as the tests run them (tests/ansible_cli.py), named here for the tests' imports.
from ansible_cli import ansible_env, ansible_tool, run_module, run_tasks  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import

FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def run_module_check(module, args):
    """Run a collection module on localhost through the `ansible` CLI in check mode
    (its own interpreter: this Python) and return its result (json callback)."""
    return run_module(module, args, check=True)


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
