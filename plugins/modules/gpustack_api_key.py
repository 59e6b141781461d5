#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpustack_api_key
short_description: Ensure a fixed (custom) GPUStack API key exists, once
version_added: "0.1.0"
description:
  - Logs in with the form login (C(POST /auth/login)) and makes sure an API key
    named O(name) with the fixed value O(key) exists
    (C(POST /v2/api-keys) with C(name) and C(custom)).
  - Idempotent. When a key of that name exists and O(key) authenticates, nothing
    changes. When the name exists but the value does not authenticate (rotated
    in the vault), the old key is deleted and the new one created.
  - The key value is never returned.
extends_documentation_fragment:
  - llmops.serving.gpustack.server
options:
  username:
    description: Admin user.
    type: str
    default: admin
  password:
    description: Password of O(username) (the bootstrap password on a fresh server).
    type: str
    required: true
  name:
    description: Name of the API key.
    type: str
    required: true
  key:
    description:
      - The fixed key value (from a vaulted variable). GPUStack stores it as a custom key.
      - Required with O(state=present).
    type: str
  description:
    description: Description stored with a new key.
    type: str
  state:
    description: C(present) or C(absent).
    type: str
    choices: [present, absent]
    default: present
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Fixed API key for automation
  llmops.serving.gpustack_api_key:
    url: http://127.0.0.1:80
    password: "{{ gpustack_bootstrap_password }}"
    name: llmops
    key: "{{ gpustack_api_key }}"
  no_log: true
"""

RETURN = r"""
id:
  description: Id of the key (null when absent).
  returned: always
  type: int
action:
  description: What was done, C(none), C(created), C(recreated) or C(deleted).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gs.server_argument_spec(),
            username=dict(type="str", default="admin"),
            password=dict(type="str", required=True, no_log=True),
            name=dict(type="str", required=True),
            key=dict(type="str", no_log=True),
            description=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["key"])],
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, id=None, action="none")
    client = gs.Client(p["url"], username=p["username"], password=p["password"], timeout=p["timeout"],
                       validate_certs=p["validate_certs"])
    try:
        client.login()
        existing = client.api_keys(p["name"])
        if p["state"] == "absent":
            if existing:
                result.update(changed=True, action="deleted", id=existing[0]["id"])
                if not module.check_mode:
                    for k in existing:
                        client.request("DELETE", "/v2/api-keys/%s" % k["id"], ok=(200, 204))
            module.exit_json(**result)
        if existing and client.key_works(p["key"]):
            result["id"] = existing[0]["id"]
            module.exit_json(**result)
        result["changed"] = True
        result["action"] = "recreated" if existing else "created"
        if module.check_mode:
            module.exit_json(**result)
        for k in existing:
            client.request("DELETE", "/v2/api-keys/%s" % k["id"], ok=(200, 204))
        body = {"name": p["name"], "custom": p["key"]}
        if p["description"]:
            body["description"] = p["description"]
        _s, created = client.request("POST", "/v2/api-keys", body=body)
        result["id"] = (created or {}).get("id")
        if not client.key_works(p["key"]):
            module.fail_json(msg="API key %r was created but does not authenticate" % p["name"], **result)
    except gs.GPUStackError as e:
        module.fail_json(msg=str(e), status=e.status, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
