# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of llmops.serving.file_set: the write gate, on the controller.

With ``host_state`` (the ``files`` of the vllm_host_state module's result, read
once before any change), the entries are compared with it on the controller
by the one rule (module_utils/vllm_host_state.py ``file_set_same``: sha1 of the
content, owner, group, mode, the module's defaults): when the host already
holds every one of them the task ends here, ``ok`` with no change and no
round trip. Otherwise - or without ``host_state`` - the module runs on the
host as usual (check mode and --diff included). A task then reads like a
plain write, with no ``when`` of its own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.serving.plugins.module_utils import vllm_host_state as hs

MODULE_ARGS = ("directories", "files")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(MODULE_ARGS + ("host_state",))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict((k, v) for k, v in self._task.args.items() if k in MODULE_ARGS)
        host_state = self._task.args.get("host_state")
        if host_state is not None:
            if not isinstance(host_state, dict):
                raise AnsibleActionFail("host_state must be the files of the vllm_host_state module's result (a dict "
                                        "of path -> stat), got %s" % type(host_state).__name__)
            if hs.file_set_same(host_state, args.get("directories") or [], args.get("files") or []):
                result.update(changed=False, changed_paths=[], host_state_same=True,
                              msg="the host state shows every path as it would be written (no round trip)")
                return result
        result.update(self._execute_module(module_name="llmops.serving.file_set", module_args=args,
                                           task_vars=task_vars))
        result["host_state_same"] = False
        return result
