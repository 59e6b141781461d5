#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpustack_cluster
short_description: Ensure a GPUStack cluster exists and read its worker registration token
version_added: "0.1.0"
description:
  - Server-only GPUStack 2.3.0 installs have no cluster; workers and models need
    one. Creates it with C(POST /v2/clusters) when missing.
  - With O(registration_token=true) returns the cluster's worker registration
    token (C(GET /v2/clusters/{id}/registration-token)). It is a secret, use
    C(no_log) on the task.
extends_documentation_fragment:
  - llmops.serving.gpustack.server
  - llmops.serving.gpustack
options:
  name:
    description: Cluster name.
    type: str
    default: default
  provider:
    description: Cluster provider.
    type: str
    choices: [Docker, Kubernetes]
    default: Docker
  registration_token:
    description: Return RV(token) (the worker registration token).
    type: bool
    default: false
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Cluster and worker token
  llmops.serving.gpustack_cluster:
    url: http://127.0.0.1:80
    api_key: "{{ gpustack_api_key }}"
    name: default
    registration_token: true
  register: cluster
  no_log: true
"""

RETURN = r"""
cluster:
  description: The cluster object (id, name, state, workers, ...).
  returned: always
  type: dict
token:
  description: The worker registration token (only with O(registration_token=true)).
  returned: when requested
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gs.connection_argument_spec(),
            name=dict(type="str", default="default"),
            provider=dict(type="str", choices=["Docker", "Kubernetes"], default="Docker"),
            registration_token=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    client = gs.client_from_module(module)
    result = dict(changed=False, cluster={})
    try:
        cluster = client.find_cluster(p["name"])
        if cluster is None:
            result["changed"] = True
            if module.check_mode:
                result["cluster"] = {"name": p["name"], "provider": p["provider"]}
                module.exit_json(**result)
            cluster = client.create_cluster(p["name"], p["provider"])
        result["cluster"] = cluster
        if p["registration_token"]:
            result["token"] = client.registration_token(cluster["id"]).get("token")
    except gs.GPUStackError as e:
        module.fail_json(msg=str(e), status=e.status, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
