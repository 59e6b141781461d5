#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpustack_model_info
short_description: Read GPUStack models, their instances and scheduling messages
version_added: "0.1.0"
description:
  - Read-only companion of M(llmops.serving.gpustack_model). Never changes anything
    (C(changed=false)), works in check mode.
  - Lists the models of a cluster, or the one model with the B(exact) O(name),
    with their instances, states and the scheduler's message.
  - An unreachable server or a refused login is reported as data
    (RV(available=false), RV(msg)) instead of a failure, like
    C(community.postgresql.postgresql_ping).
extends_documentation_fragment:
  - llmops.serving.gpustack.server
  - llmops.serving.gpustack
options:
  name:
    description: Exact model name; all models of the cluster when omitted.
    type: str
  cluster:
    description: Cluster name; the default cluster when omitted.
    type: str
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the model tiny
  llmops.serving.gpustack_model_info:
    url: http://127.0.0.1:80
    api_key: "{{ gpustack_api_key }}"
    name: tiny
  register: info
"""

RETURN = r"""
available:
  description: Whether the server answered and the credentials were accepted.
  returned: always
  type: bool
msg:
  description: Why the server was not available (empty when available).
  returned: always
  type: str
cluster:
  description: The cluster read (id, name); empty when there is none.
  returned: always
  type: dict
models:
  description: Models, each with C(instances), C(states) and C(scheduling_message) added.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gs.connection_argument_spec(),
            name=dict(type="str"),
            cluster=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, available=False, msg="", cluster={}, models=[])
    client = gs.client_from_module(module)
    try:
        cluster = client.find_cluster(p["cluster"])
        result["available"] = True
        if cluster is None:
            module.exit_json(**result)
        result["cluster"] = {"id": cluster["id"], "name": cluster["name"]}
        if p["name"]:
            models = client.find_models(p["name"], cluster["id"])
        else:
            models = client.list_all("/v2/models", {"cluster_id": cluster["id"]})
        out = []
        for m in sorted(models, key=lambda x: x.get("name") or ""):
            instances = [gs.trim_instance(i) for i in client.instances(m["id"])]
            m = dict(m)
            m["instances"] = instances
            m["states"] = [i.get("state") for i in instances]
            m["scheduling_message"] = gs.scheduling_message(instances)
            out.append(m)
        result["models"] = out
    except gs.GPUStackError as e:
        result["available"] = False
        result["msg"] = str(e)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
