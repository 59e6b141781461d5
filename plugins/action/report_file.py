# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of llmops.serving.report_file: write a report on the controller
in the ansible-playbook process itself (no module run, no Python started)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes
from ansible.parsing.ajson import AnsibleJSONEncoder
from ansible.plugins.action import ActionBase

ARGS = {
    "dest": {"type": "path", "required": True},
    "content": {"type": "str"},
    "data": {"type": "raw"},
    "mode": {"type": "str", "default": "0644"},
}


def render(content, data):
    """The file's bytes: the text as is, or the data as to_nice_json writes it + a newline."""
    if data is not None:
        return to_bytes(json.dumps(data, cls=AnsibleJSONEncoder, indent=4, sort_keys=True,
                                   separators=(",", ": ")) + "\n")
    return to_bytes(content)


def write_atomic(dest, payload, mode):
    """Write payload to dest through a temporary file in the same directory (a reader
    never sees half a file); parent directories are made with mode 0755."""
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".%s." % os.path.basename(dest))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(
            argument_spec=ARGS, mutually_exclusive=[["content", "data"]], required_one_of=[["content", "data"]])
        try:
            mode = int(args["mode"], 8)
        except ValueError:
            raise AnsibleActionFail("mode=%r is not an octal mode: give it as a string, e.g. '0644'" % args["mode"])
        result["changed"] = False
        if self._task.check_mode:
            result["written"] = False
            return result
        payload = render(args["content"], args["data"])
        try:
            write_atomic(args["dest"], payload, mode)
        except OSError as exc:
            raise AnsibleActionFail("cannot write %s on the controller: %s" % (args["dest"], exc))
        result.update(written=True, dest=args["dest"], size=len(payload))
        return result
