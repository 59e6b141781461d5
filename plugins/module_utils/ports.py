# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The port rule, once: which ports each KIND of port may take, and one
message shape for a port that is not one of them.

``KINDS`` decides the range per kind in one place:

- ``instance``: a vLLM instance's ``port`` (vllm_instances[N].port). 1024..65535:
  the unit runs as an unprivileged user without capabilities
  (CapabilityBoundingSet= empty), so it cannot bind a port below 1024.
- ``master_port``: the torch.distributed rendezvous of an instance that spans
  hosts (vllm_instances[N].master_port), bound by the same unprivileged unit: 1024..65535.
- ``agent``: the gateway agent's port on a vLLM host (vllm_gateway_agent_port):
  systemd binds its socket (root), so 1..65535, and 0 = no agent.
- ``gateway``: the gateway's own ports (gateway_port, gateway_peers_port):
  HAProxy binds them as root before dropping privileges, so 1..65535.

Only ``problem`` says a port is wrong; every checker calls it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MAX_PORT = 65535
UNPRIVILEGED_WHY = ("the unit runs as an unprivileged user without capabilities, so it cannot bind ports below "
                    "1024; put a proxy on a low port if you need one")

# kind -> (lowest, highest, 0 allowed (off), why the range)
KINDS = {
    "instance": (1024, MAX_PORT, False, UNPRIVILEGED_WHY),
    "master_port": (1024, MAX_PORT, False, UNPRIVILEGED_WHY),
    "agent": (1, MAX_PORT, True, None),
    "gateway": (1, MAX_PORT, False, None),
}


def as_port(value):
    """An int from an int or a string of digits (Ansible may template either); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def port_range(kind):
    """(lowest, highest) of ``kind``."""
    low, high, dummy, dummy = KINDS[kind]
    return low, high


def problem(kind, where, value):
    """None when ``value`` is a port of ``kind`` (see ``KINDS``); else the one message shape:
    ``WHERE must be a TCP port in LOW..HIGH[, or 0 for none] (got VALUE)[: WHY]``."""
    low, high, zero, why = KINDS[kind]
    port = as_port(value)
    if port is not None and (low <= port <= high or (zero and port == 0)):
        return None
    return "%s must be a TCP port in %d..%d%s (got %r)%s" % (
        where, low, high, ", or 0 for none" if zero else "", value, ": " + why if why else "")
