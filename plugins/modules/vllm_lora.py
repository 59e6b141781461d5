#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_lora
short_description: Keep a running vLLM server's LoRA adapters equal to a list, without a restart
version_added: "0.3.0"
description:
  - Reads the adapters the server serves (C(GET /v1/models), the entries with a C(parent)), then loads what is
    missing (C(POST /v1/load_lora_adapter)) and, with O(exclusive), unloads what is not listed
    (C(POST /v1/unload_lora_adapter)); an adapter whose path changed is unloaded and loaded again. Reads the list
    again afterwards and fails when a loaded adapter is not in it.
  - The routes exist only on a server started with C(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) (an instance's C(env) in
    the vllm_service role); without it the task fails naming that variable. The same adapters belong in the instance's
    C(lora_adapters) too, so that a restart keeps them.
  - The vllm_service role runs it itself for an active instance whose adapter list alone changed (its change plan's
    C(lora_sync)), instead of a restart.
  - These routes never pass the gateway (it refuses them); run the module on the vLLM host against the instance's
    own URL.
  - Check mode reads only and says what would change; C(--diff) shows the adapters before and after (name and path).
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests)).
extends_documentation_fragment:
  - llmops.serving.vllm
  - llmops.serving.vllm.validate_certs
options:
  adapters:
    description: The adapters the server should serve - C(name) (what clients send as C(model)) and C(path) (the
      adapter directory on the host).
    type: list
    elements: dict
    required: true
    suboptions:
      name: {description: The adapter's name., type: str, required: true}
      path: {description: The adapter directory on the host., type: path, required: true}
      base: {description: Ignored (the instance view's entries carry it; vllm_service checks it before any change)., type: str}
  exclusive:
    description: Unload the adapters the server serves that O(adapters) does not list.
    type: bool
    default: true
  instance:
    description: Name of the instance (vllm_service's C(name)), for the messages.
    type: str
seealso:
  - module: llmops.serving.vllm_health
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Serve exactly these adapters on instance default (no restart)
  llmops.serving.vllm_lora:
    url: http://127.0.0.1:8000
    instance: default
    api_key_env_file: /etc/vllm/default.env
    adapters:
      - {name: sql, path: /srv/lora/sql}
      - {name: support, path: /srv/lora/support}
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
"""

RETURN = r"""
loaded:
  description: Adapters loaded (in check mode, that would be loaded).
  returned: success
  type: list
  elements: str
unloaded:
  description: Adapters unloaded (in check mode, that would be unloaded).
  returned: success
  type: list
  elements: str
adapters:
  description: The adapters the server serves after the task (in check mode, would serve).
  returned: success
  type: list
  elements: str
before:
  description: The adapters the server served before the task.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    connection_argument_spec, resolve_api_key, require_libs)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_lora_runtime import LoraError, runtime


def main():
    module = AnsibleModule(
        argument_spec=dict(
            connection_argument_spec(),
            adapters=dict(type="list", elements="dict", required=True,
                          options=dict(name=dict(type="str", required=True), path=dict(type="path", required=True),
                                       base=dict(type="str"))),
            exclusive=dict(type="bool", default=True),
            instance=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    require_libs(module)
    p = module.params
    ctl = runtime(p["url"], api_key=resolve_api_key(module), timeout=p["timeout"], instance=p["instance"],
                  validate_certs=p["validate_certs"])
    try:
        result = ctl.sync(p["adapters"], exclusive=p["exclusive"], check_mode=module.check_mode)
    except LoraError as e:
        module.fail_json(msg=str(e))
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
