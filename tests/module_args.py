"""``patch_module_args``: the module arguments an AnsibleModule reads, for a
module's main() called in-process. ansible-core 2.19+ ships it
(ansible.module_utils.testing); on older cores the same thing is done the way
those cores read their arguments: ``basic._ANSIBLE_ARGS`` (the JSON a module
gets on stdin), restored afterwards."""
import contextlib
import json

try:
    from ansible.module_utils.testing import patch_module_args  # noqa: F401  pylint: disable=unused-import
except ImportError:  # ansible-core < 2.19
    from ansible.module_utils import basic

    @contextlib.contextmanager
    def patch_module_args(args=None):
        payload = dict(args or {})
        payload.setdefault("_ansible_remote_tmp", "/tmp")
        payload.setdefault("_ansible_keep_remote_files", False)
        old = basic._ANSIBLE_ARGS  # pylint: disable=protected-access
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode("utf-8")  # pylint: disable=protected-access
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = old  # pylint: disable=protected-access
