#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpustack_model
short_description: Create, update or delete a GPUStack model by exact name
version_added: "0.1.0"
description:
  - Manages one model deployment of a GPUStack 2.3.0 server through its REST API.
  - The model is found by its B(exact) name in the cluster (the API's
    C(search) is fuzzy, so C(tiny) also finds C(tiny-sel); those are ignored).
  - Updates send the merged full object with C(PUT /v2/models/{id}) (the API
    answers a partial body with 422).
  - Creates the cluster when the server has none (server-only installs have
    none) with C(POST /v2/clusters) and provider C(Docker).
  - Static, deterministic GPU memory is expressed with the real levers,
    C(--gpu-memory-utilization=<x>) in O(backend_parameters) and O(gpu_selector)
    (see the C(llmops.serving.gpustack_placement) filter).
extends_documentation_fragment:
  - llmops.serving.gpustack.server
  - llmops.serving.gpustack
options:
  name:
    description: Model name (exact).
    type: str
    required: true
  state:
    description: C(present) creates/updates, C(absent) deletes.
    type: str
    choices: [present, absent]
    default: present
  cluster:
    description:
      - Cluster name. Default is the server's default cluster.
      - When no cluster of that name (or none at all) exists, it is created
        if O(create_cluster=true); the name is then O(cluster) or C(default).
    type: str
  create_cluster:
    description: Create the cluster when it does not exist.
    type: bool
    default: true
  source:
    description: Where the model files come from. Required with O(state=present).
    type: dict
    suboptions:
      type:
        description: Source kind.
        type: str
        required: true
        choices: [local_path, huggingface, model_scope]
      local_path:
        description: Path on the worker (O(source.type=local_path)).
        type: str
      huggingface_repo_id:
        description: Hugging Face repository id (O(source.type=huggingface)).
        type: str
      huggingface_filename:
        description: File inside the repository (GGUF).
        type: str
      model_scope_model_id:
        description: ModelScope model id (O(source.type=model_scope)).
        type: str
      model_scope_file_path:
        description: File inside the ModelScope model.
        type: str
  backend:
    description: Inference backend, e.g. C(vLLM).
    type: str
    default: vLLM
  backend_version:
    description: Backend version; unset lets GPUStack choose.
    type: str
  backend_parameters:
    description:
      - Backend flags, e.g. C(--gpu-memory-utilization=0.90) and C(--max-model-len=4096).
    type: list
    elements: str
  replicas:
    description: Number of replicas.
    type: int
    default: 1
  gpu_selector:
    description:
      - Pin the model to GPUs, keys C(gpu_ids) (list of C(<worker>:cuda:<i>)) and C(gpus_per_replica).
      - Only the sub-keys given are compared with the server's object.
    type: dict
  env:
    description: Environment variables for the model instances.
    type: dict
  description:
    description: Free text description.
    type: str
  extra:
    description: Other fields of the GPUStack model object, sent as given (e.g. C(categories)).
    type: dict
  wait:
    description: Wait until the instances reach O(wait_state).
    type: bool
    default: false
  wait_state:
    description:
      - C(running) all replicas running; C(scheduled) every instance scheduled or further;
        C(pending) every instance evaluated by the scheduler (useful without
        workers, to read the scheduling message).
    type: str
    choices: [running, scheduled, pending]
    default: running
  wait_timeout:
    description: Seconds to wait.
    type: int
    default: 300
  fail_on_timeout:
    description: Fail when O(wait_state) is not reached (the result still carries the states and the scheduler's message).
    type: bool
    default: true
notes:
  - Check mode is supported with diff (the managed fields before/after).
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Register a local model pinned to GPU 0 of worker gpu-a with 72 GiB of 80
  llmops.serving.gpustack_model:
    url: http://127.0.0.1:80
    api_key: "{{ gpustack_api_key }}"
    name: qwen2-7b
    source:
      type: local_path
      local_path: /models/Qwen2-7B
    backend: vLLM
    backend_parameters:
      - --gpu-memory-utilization=0.90
      - --max-model-len=8192
    gpu_selector:
      gpu_ids: ["gpu-a:cuda:0"]
      gpus_per_replica: 1
    wait: true
    wait_state: running

- name: Without workers, read why the scheduler cannot place it
  llmops.serving.gpustack_model:
    url: http://127.0.0.1:80
    api_key: "{{ gpustack_api_key }}"
    name: tiny
    source: {type: local_path, local_path: /srv/models/tiny}
    wait: true
    wait_state: pending
  register: m
# m.scheduling_message == "No available workers"

- name: Delete
  llmops.serving.gpustack_model:
    url: http://127.0.0.1:80
    api_key: "{{ gpustack_api_key }}"
    name: tiny
    state: absent
"""

RETURN = r"""
model:
  description: The model object as the server returns it (empty when absent).
  returned: always
  type: dict
instances:
  description: The model's instances (id, name, state, state_message, worker_name, gpu_indexes, computed_resource_claim, ...).
  returned: always
  type: list
  elements: dict
states:
  description: The instance states, e.g. C(["pending"]).
  returned: always
  type: list
  elements: str
scheduling_message:
  description:
    - The scheduler's message of a pending/error instance, e.g. C(No available workers) or
      C(The model requires approximately 2.0 GiB of VRAM ...). Null when none.
  returned: always
  type: str
reached:
  description: Whether O(wait_state) was reached (null without O(wait)).
  returned: always
  type: bool
cluster:
  description: The cluster used (id, name); C(created) is true when this run created it.
  returned: always
  type: dict
changed_fields:
  description: Fields that differed and were (or would be) updated.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs

SOURCE_REQUIRED = {
    "local_path": "local_path",
    "huggingface": "huggingface_repo_id",
    "model_scope": "model_scope_model_id",
}


def argument_spec():
    return dict(
        gs.connection_argument_spec(),
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        cluster=dict(type="str"),
        create_cluster=dict(type="bool", default=True),
        source=dict(type="dict", options=dict(
            type=dict(type="str", required=True, choices=list(SOURCE_REQUIRED)),
            local_path=dict(type="str"),
            huggingface_repo_id=dict(type="str"),
            huggingface_filename=dict(type="str"),
            model_scope_model_id=dict(type="str"),
            model_scope_file_path=dict(type="str"),
        )),
        backend=dict(type="str", default="vLLM"),
        backend_version=dict(type="str"),
        backend_parameters=dict(type="list", elements="str"),
        replicas=dict(type="int", default=1),
        gpu_selector=dict(type="dict"),
        env=dict(type="dict"),
        description=dict(type="str"),
        extra=dict(type="dict"),
        wait=dict(type="bool", default=False),
        wait_state=dict(type="str", choices=["running", "scheduled", "pending"], default="running"),
        wait_timeout=dict(type="int", default=300),
        fail_on_timeout=dict(type="bool", default=True),
    )


def resolve_cluster(module, client, result):
    p = module.params
    cluster = client.find_cluster(p["cluster"])
    if cluster is not None:
        result["cluster"] = {"id": cluster["id"], "name": cluster["name"], "created": False}
        return cluster["id"]
    if not p["create_cluster"]:
        module.fail_json(msg="cluster %r not found on %s and create_cluster=false" % (p["cluster"] or "(default)", p["url"]),
                         **result)
    name = p["cluster"] or "default"
    if module.check_mode:
        result["cluster"] = {"id": None, "name": name, "created": True}
        result["changed"] = True
        return None
    created = client.create_cluster(name)
    result["cluster"] = {"id": created["id"], "name": created["name"], "created": True}
    result["changed"] = True
    return created["id"]


def validate(module):
    p = module.params
    if p["state"] == "present":
        if not p["source"]:
            module.fail_json(msg="source is required with state=present (type: local_path|huggingface|model_scope)")
        need = SOURCE_REQUIRED[p["source"]["type"]]
        if not p["source"].get(need):
            module.fail_json(msg="source.%s is required with source.type=%s" % (need, p["source"]["type"]))
        if p["replicas"] < 0:
            module.fail_json(msg="replicas must be >= 0")
        sel = p["gpu_selector"]
        if sel is not None:
            unknown = set(sel) - {"gpu_ids", "gpus_per_replica"}
            if unknown:
                module.fail_json(msg="gpu_selector takes gpu_ids and gpus_per_replica, not %s" % ", ".join(sorted(unknown)))
            ids = sel.get("gpu_ids") or []
            if not isinstance(ids, list) or any(len(str(i).split(":")) != 3 for i in ids):
                module.fail_json(msg="gpu_selector.gpu_ids must be a list of '<worker>:<type>:<index>', e.g. 'gpu-a:cuda:0'")


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    validate(module)
    p = module.params
    result = dict(changed=False, model={}, instances=[], states=[], scheduling_message=None, reached=None,
                  cluster={}, changed_fields=[])
    client = gs.client_from_module(module)
    try:
        cluster_id = resolve_cluster(module, client, result)
        current = None
        if cluster_id is not None:
            found = client.find_models(p["name"], cluster_id)
            if len(found) > 1:
                module.fail_json(msg="%d models named %r in cluster %s" % (len(found), p["name"], cluster_id), **result)
            current = found[0] if found else None

        if p["state"] == "absent":
            if current is not None:
                result["changed"] = True
                result["diff"] = {"before": gs.view(current, ["name", "cluster_id"]), "after": {}}
                if not module.check_mode:
                    client.delete_model(current["id"])
                result["model"] = current
            module.exit_json(**result)

        desired = gs.desired_model(p, cluster_id)
        if current is None:
            result["changed"] = True
            result["changed_fields"] = sorted(desired)
            result["diff"] = {"before": {}, "after": gs.view(desired, desired.keys())}
            if module.check_mode:
                result["model"] = desired
                module.exit_json(**result)
            model = client.create_model(desired)
        else:
            diff_keys = gs.compare(desired, current)
            result["changed_fields"] = diff_keys
            model = current
            if diff_keys:
                result["changed"] = True
                body = gs.merged_update_body(current, desired)
                result["diff"] = {"before": gs.view(current, diff_keys), "after": gs.view(body, diff_keys)}
                if module.check_mode:
                    result["model"] = body
                    result["instances"] = [gs.trim_instance(i) for i in client.instances(current["id"])]
                    result["states"] = [i.get("state") for i in result["instances"]]
                    module.exit_json(**result)
                model = client.update_model(current["id"], body)

        if p["wait"] and not module.check_mode:
            ok, model, instances = gs.wait_for(client, model["id"], p["wait_state"], p["wait_timeout"])
            result["reached"] = ok
        else:
            instances = client.instances(model["id"])
        result["model"] = model
        result["instances"] = [gs.trim_instance(i) for i in instances]
        result["states"] = [i.get("state") for i in instances]
        result["scheduling_message"] = gs.scheduling_message(instances)
        if p["wait"] and not result["reached"] and p["fail_on_timeout"]:
            module.fail_json(
                msg="model %r did not reach %r within %ss: states %s; scheduler: %s"
                % (p["name"], p["wait_state"], p["wait_timeout"], result["states"], result["scheduling_message"]),
                **result)
    except gs.GPUStackError as e:
        result["status"] = e.status
        module.fail_json(msg=str(e), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
