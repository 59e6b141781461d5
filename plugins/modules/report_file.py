#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: report_file
short_description: Write a report file on the controller, without a module round trip
version_added: "0.4.0"
description:
  - Writes O(content) (text) or O(data) (as indented JSON with sorted keys, the same bytes as
    C(to_nice_json)) to O(dest) on the Ansible controller, creating the missing parent
    directories. The file is written to a temporary file beside it and moved into place, so
    a reader never sees half a report.
  - An action plugin; it runs in the controller's C(ansible-playbook) process, so it starts no
    Python on any host or on the controller. C(ansible.builtin.copy) with
    C(delegate_to=localhost) costs three module runs on the controller (about 1.1 s here); this
    costs none. The reports of C(playbooks/report.yml) and C(playbooks/drift.yml) use it.
  - Reports are output, not managed state. C(changed) is always C(false), so a converged fleet
    reads C(changed=0). In check mode nothing is written, unless the task sets
    C(check_mode=false) (the drift report is written in check mode on purpose).
  - Only for reports without secrets; the file is readable by everyone unless O(mode) says
    otherwise.
options:
  dest:
    description: Path of the file on the controller. Its parent directories are created (mode 0755).
    type: path
    required: true
  content:
    description: Text to write as is. Exactly one of O(content) and O(data).
    type: str
  data:
    description: Data to write as JSON (indent 4, sorted keys, a final newline). Exactly one of O(content) and O(data).
    type: raw
  mode:
    description: Mode of the file, as an octal string.
    type: str
    default: "0644"
notes:
  - Runs on the controller only; C(delegate_to) and the connection do not matter.
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write the JSON report on the controller
  llmops.serving.report_file:
    dest: "{{ playbook_dir }}/../reports/report-{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}.json"
    data:
      generated_at: "{{ now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ') }}"
      rows: "{{ rows }}"
  run_once: true
  register: report
"""

RETURN = r"""
dest:
  description: Path written; absent when nothing was written (check mode).
  returned: when written
  type: str
  sample: /srv/ansible/reports/report-20261202T040000Z.json
size:
  description: Bytes written.
  returned: when written
  type: int
written:
  description: Whether the file was written (C(false) in check mode).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    # The options as the action plugin reads them (plugins/action/report_file.py: ARGS).
    module = AnsibleModule(argument_spec=dict(
        dest=dict(type="path", required=True),
        content=dict(type="str"),
        data=dict(type="raw"),
        mode=dict(type="str", default="0644"),
    ), mutually_exclusive=[["content", "data"]], required_one_of=[["content", "data"]], supports_check_mode=True)
    module.fail_json(msg="llmops.serving.report_file runs on the controller through its action plugin; "
                         "call it as a task, not as a module of ad-hoc ansible")


if __name__ == "__main__":
    main()
