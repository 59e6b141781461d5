#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file_set
short_description: Ensure several directories and small files (content, owner, group, mode) in one module call
version_added: "0.3.0"
description:
  - One host round trip for what would otherwise be one C(ansible.builtin.file) task per directory and one
    C(ansible.builtin.copy)/C(ansible.builtin.template) task (two round trips when nothing changes) per file.
    The roles render the content on the controller (C(lookup('ansible.builtin.template', ...)),
    C(lookup('ansible.builtin.file', ...))) and pass it here.
  - Directories are created (with missing parents) and given owner, group and mode; files are written
    atomically (a temporary file in the same directory, then a rename) only when their content differs, and
    given owner, group and mode. Directories come first, in the order given, then the files.
  - Check mode reports what would change and changes nothing; with C(--diff) each changed path gets a
    before/after entry (file content, or the changed owner/group/mode).
  - Not for secrets; the content is a module argument (use C(ansible.builtin.template) with C(no_log) for
    files that hold keys).
  - With O(host_state) the action plugin decides on the controller, from the host state read before any change,
    whether the module needs to run at all (the write gate of the vllm_service role, one rule for every write).
options:
  directories:
    description: Directories to ensure; each entry names one (O(directories[].path)) or several (O(directories[].paths)) with the same owner, group and mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: path}
      paths: {description: Absolute paths., type: list, elements: path}
      owner: {description: Owner name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Mode as an octal string (C("0755")., type: str, default: "0755"}
  files:
    description: Files to ensure.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path; its directory must exist (or be listed in O(directories))., type: path, required: true}
      content: {description: The whole content (text)., type: str, required: true}
      owner: {description: Owner name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: Mode as an octal string (C("0644")., type: str, default: "0644"}
  host_state:
    description:
      - The C(files) of the M(llmops.serving.vllm_host_state) module's result (path -> stat), read before any change.
        Handled on the controller by the action plugin - when the host already holds every directory and file as
        asked (same sha1 of the content, owner, group and mode), the task ends there with no change and no host
        round trip; otherwise the module runs as usual. A path the state does not describe counts as different.
    type: dict
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the watchdog files and units in one call
  llmops.serving.file_set:
    directories:
      - paths: [/etc/systemd/system/vllm-watchdog@default.service.d, /etc/systemd/system/vllm-watchdog@b.service.d]
    files:
      - path: /opt/vllm/bin/vllm-watchdog.py
        content: "{{ lookup('ansible.builtin.file', 'vllm-watchdog.py', rstrip=false) }}"
        mode: "0755"
      - path: /etc/systemd/system/vllm-watchdog@.timer
        content: "{{ lookup('ansible.builtin.template', 'vllm-watchdog@.timer.j2') }}"
  register: watchdog_files
  notify: Reload systemd
"""

RETURN = r"""
changed_paths:
  description: The directories and files that were (in check mode, would be) created or changed, in order.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/vllm-watchdog@.timer]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text


class FileSet(object):
    """Directories, then files; every change recorded in ``changed_paths`` and, with --diff, ``diff``."""

    def __init__(self, module):
        self.module = module
        self.changed_paths = []
        self.diff = []

    def _attrs(self, entry):
        return dict(path=entry["path"], owner=entry["owner"], group=entry["group"], mode=entry["mode"],
                    secontext=None, attributes=None)

    def _fix_attrs(self, entry, created):
        diff = {"before": {"path": entry["path"]}, "after": {"path": entry["path"]}}
        changed = self.module.set_fs_attributes_if_different(self._attrs(entry), created, diff=diff, expand=False)
        return changed, diff

    def _record(self, path, changed, diff):
        if changed:
            self.changed_paths.append(path)
            if self.module._diff and diff is not None:
                self.diff.append(diff)

    def directory(self, entry):
        path = entry["path"]
        if not os.path.isabs(path):
            self.module.fail_json(msg="file_set: directories[].path must be absolute (got %s)" % path)
        created = False
        if not os.path.isdir(path):
            if os.path.lexists(path):
                self.module.fail_json(msg="file_set: %s exists and is not a directory" % path)
            created = True
            if self.module.check_mode:
                self._record(path, True, {"before": {"path": path, "state": "absent"},
                                          "after": {"path": path, "state": "directory"}})
                return
            os.makedirs(path)
        changed, diff = self._fix_attrs(entry, created)
        if created:
            diff["before"]["state"], diff["after"]["state"] = "absent", "directory"
        self._record(path, changed, diff)

    def file(self, entry):
        path = entry["path"]
        if not os.path.isabs(path):
            self.module.fail_json(msg="file_set: files[].path must be absolute (got %s)" % path)
        new = to_bytes(entry["content"], errors="surrogate_or_strict")
        old = None
        if os.path.lexists(path):
            if not os.path.isfile(path) or os.path.islink(path):
                self.module.fail_json(msg="file_set: %s exists and is not a regular file" % path)
            with open(path, "rb") as fh:
                old = fh.read()
        content_changed = old != new
        diff = {"before_header": path, "after_header": path,
                "before": to_text(old or b"", errors="surrogate_or_replace"),
                "after": to_text(new, errors="surrogate_or_replace")}
        if content_changed and self.module.check_mode:
            self._record(path, True, diff)
            return
        if content_changed:
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                self.module.fail_json(msg="file_set: the directory of %s does not exist; list it under directories"
                                      % path)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(new)
                self.module.atomic_move(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        attrs_changed, attrs_diff = self._fix_attrs(entry, content_changed)
        if not content_changed:
            diff = attrs_diff
        self._record(path, content_changed or attrs_changed, diff)

    def run(self):
        for entry in self.module.params["directories"]:
            for path in ([entry["path"]] if entry["path"] else []) + (entry["paths"] or []):
                self.directory(dict(entry, path=path))
        for entry in self.module.params["files"]:
            self.file(entry)
        result = {"changed": bool(self.changed_paths), "changed_paths": self.changed_paths}
        if self.module._diff:
            result["diff"] = self.diff
        return result


def main():
    entry = dict(path=dict(type="path", required=True), owner=dict(type="str", default="root"),
                 group=dict(type="str", default="root"))
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", default=[],
                             options=dict(entry, path=dict(type="path"), paths=dict(type="list", elements="path"),
                                          mode=dict(type="str", default="0755")),
                             mutually_exclusive=[("path", "paths")], required_one_of=[("path", "paths")]),
            files=dict(type="list", elements="dict", default=[],
                       options=dict(entry, content=dict(type="str", required=True),
                                    mode=dict(type="str", default="0644"))),
            # The action plugin's (plugins/action/file_set.py): never passed to the module.
            host_state=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**FileSet(module).run())


if __name__ == "__main__":
    main()
