#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain or ready one HAProxy server through the runtime API, waiting (bounded) for it
version_added: "0.1.0"
description:
  - Talks to HAProxy's stats socket (C(set server BACKEND/SERVER state drain|ready|maint),
    C(show stat)). Used by the C(llmops.serving.gateway) role's C(drain) and C(ready) entry points
    around a vLLM restart.
  - O(state=drain) stops new traffic to the server and, with O(wait), waits until its current and
    queued sessions are 0. With O(require_other_ready) it first waits until another server of the
    same backend is ready (UP, not drained), so a model never loses its last ready server; a
    backend with this server only is drained anyway, listed in RV(sole_server), and the play warns
    naming the model (its requests get 503 until the server is ready again).
  - O(state=ready) puts the server back and, with O(wait), waits until its health check reports UP.
  - A missing socket or a server the gateway does not know (first deployment) is returned as data
    (RV(unavailable)), not as a failure. Check mode reads only.
options:
  socket:
    description: Path of the stats socket (admin level).
    type: path
    default: /run/haproxy/admin.sock
  server:
    description: Server name (the gateway role names them C(INVENTORYHOST__INSTANCE)).
    type: str
    required: true
  backend:
    description: Only this backend; default every backend that holds O(server).
    type: str
  state:
    description: Administrative state to set.
    type: str
    choices: [ready, drain, maint]
    required: true
  wait:
    description: Wait for 0 sessions (drain) or health UP (ready).
    type: bool
    default: true
  timeout:
    description: Seconds to wait at most (both waits together); then the module fails.
    type: float
    default: 300
  require_other_ready:
    description: Before draining, wait until another server of the backend is ready.
    type: bool
    default: true
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Drain an instance before its restart
  llmops.serving.haproxy_server:
    server: node1__default
    state: drain
    timeout: 120
"""

RETURN = r"""
backends:
  description: One entry per backend touched, with status and sessions before and after.
  returned: always
  type: list
  elements: dict
unavailable:
  description: Why nothing could be done (no socket, server not in the gateway).
  returned: when nothing could be done
  type: str
sole_server:
  description: Backends drained although this was their only server.
  returned: always
  type: list
  elements: str
waited_s:
  description: Seconds waited.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.haproxy_runtime import (
    HaproxyRuntimeError, Runtime, ServerState, sole_server_warning)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/haproxy/admin.sock"),
            server=dict(type="str", required=True),
            backend=dict(type="str"),
            state=dict(type="str", required=True, choices=["ready", "drain", "maint"]),
            wait=dict(type="bool", default=True),
            timeout=dict(type="float", default=300),
            require_other_ready=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rt = Runtime(p["socket"])
    if not rt.available():
        module.exit_json(changed=False, backends=[], sole_server=[], waited_s=0.0,
                         unavailable="no HAProxy stats socket at %s (gateway not deployed yet?)" % p["socket"])
    try:
        result = ServerState(rt, p["server"], p["backend"]).apply(
            p["state"], check_mode=module.check_mode, wait=p["wait"], timeout=p["timeout"],
            require_other_ready=p["require_other_ready"])
    except (HaproxyRuntimeError, OSError) as exc:
        module.fail_json(msg=str(exc))
    warning = sole_server_warning(p["server"], result["sole_server"])
    if warning:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
