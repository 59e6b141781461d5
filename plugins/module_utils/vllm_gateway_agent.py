# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The gateway agent of a vLLM host (issue 31 item 2: no client traffic before the warmup hook is done).

HAProxy's ``agent-check`` asks ``llmops-vllm-agent.socket`` on each vLLM host for one instance
(``agent-send "NAME\\n"``); roles/vllm_service/files/vllm-gateway-agent.sh answers ``up`` when
``vllm@NAME.service`` is active (systemd turns it active only after the warmup hook, ExecStartPost,
succeeded) and ``down`` while it is activating, failed or stopped. The gateway then holds requests
(hold.lua) through restarts that systemd makes (Restart=, the watchdog, ``systemctl restart``), not
only through the ones the role makes (drain/ready).

Pure functions (stdlib only) for the controller:
  plan(views, settings): where the agent listens on this host, what the gateway is told, and
    every problem of the settings (named variable and fix).
  drift_rows(host, data): the agent's drift rows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.llmops.serving.plugins.module_utils import ports

UNIT_SOCKET = "llmops-vllm-agent.socket"
UNIT_SERVICE = "llmops-vllm-agent@.service"
SCRIPT = "vllm-gateway-agent.sh"
LOOPBACK_NAMES = {"localhost": "127.0.0.1"}
# A stop delay longer than this keeps every stop (a reboot, a rollback) waiting for nothing.
MAX_STOP_DELAY = 60


def _ip(text):
    try:
        return ipaddress.ip_address(str(text).strip("[]"))
    except ValueError:
        return None


def _listen(address, port):
    return ("[%s]:%d" if ":" in address else "%s:%d") % (address, port)


def plan(views, settings):
    """The agent of one vLLM host.

    ``views``: the host's ``vllm_view``; ``settings``: ``port`` (vllm_gateway_agent_port, 0: off),
    ``address`` (vllm_gateway_agent_address, '' = the address each instance binds), ``fronted``
    (a gateway fronts this host: gateway hosts in the inventory or vllm_gateway_fronted),
    ``stop_delay`` (vllm_gateway_stop_delay, seconds; 0: none).

    Returns ``{"on", "port", "address", "listen": ["ADDR:PORT"], "exec_stop", "problems": [...]}``:
    ``address`` is what the gateway is told (``agent-addr``; '' = the server's own address), ``listen``
    the socket's ListenStream lines, ``exec_stop`` the ``ExecStop=`` command of every instance that
    serves HTTP ('' for none: see exec_stop()). Off (port 0, or no gateway) is ``on: false`` with no
    problems.
    """
    raw_port = settings.get("port", 0)
    address = str(settings.get("address") or "").strip()
    problems = []
    delay, delay_problem = _stop_delay(settings.get("stop_delay", 0))
    if delay_problem:
        problems.append(delay_problem)
    msg = ports.problem("agent", "vllm_gateway_agent_port", raw_port)
    if msg:
        problems.append(msg + ". Nothing was changed.")
        return _off(problems)
    port = ports.as_port(raw_port)
    serving = [v for v in (views or []) if v.get("serves_http", True)]
    if port == 0 or not settings.get("fronted") or not serving:
        return _off(problems)
    if address:
        if _ip(address) is None:
            problems.append("vllm_gateway_agent_address %r is no IP address: give the address the gateway reaches "
                            "this host at (systemd binds the agent's socket to it), or '' for the instances' own "
                            "bind addresses. Nothing was changed." % address)
        addresses = [str(address).strip("[]")]
    else:
        addresses = []
        for v in serving:
            bind = LOOPBACK_NAMES.get(str(v.get("host")), str(v.get("host")))
            if _ip(bind) is None:
                problems.append("instance %s binds %r, a name the gateway agent cannot listen on (systemd needs "
                                "an address): set vllm_gateway_agent_address to the IP address the gateway "
                                "reaches this host at, or vllm_gateway_agent_port: 0. Nothing was changed."
                                % (v.get("name"), v.get("host")))
            elif bind not in addresses:
                addresses.append(bind)
    for v in serving:
        if int(v.get("port", 0)) == port:
            problems.append("vllm_gateway_agent_port %d is the port of instance %s: pick another port for the "
                            "gateway agent (each host of a shared network namespace needs its own). Nothing was "
                            "changed." % (port, v.get("name")))
    if problems:
        return _off(problems)
    return dict(on=True, port=port, address=str(address).strip("[]"),
                listen=[_listen(a, port) for a in sorted(addresses)], exec_stop=exec_stop(delay), problems=[])


def _off(problems):
    return dict(on=False, port=0, address="", listen=[], exec_stop="", problems=problems)


def _stop_delay(raw):
    """(seconds, problem or None) of vllm_gateway_stop_delay."""
    try:
        delay = int(str(raw))
    except ValueError:
        delay = -1
    if isinstance(raw, bool) or not 0 <= delay <= MAX_STOP_DELAY:
        return 0, ("vllm_gateway_stop_delay must be whole seconds from 0 (no delay) to %d, longer than the "
                   "gateway's agent interval (gateway_health_interval, 2s by default); got %r. Nothing was "
                   "changed." % (MAX_STOP_DELAY, raw))
    return delay, None


def exec_stop(delay):
    """The ``ExecStop=`` command that keeps a running server up DELAY seconds after a stop was asked.

    systemd runs ExecStop= before it sends SIGTERM; meanwhile the unit is ``deactivating``, so the
    agent answers ``down #deactivating`` and the gateway takes the server out of rotation (and holds
    the model's requests while it has no other server) before vLLM starts shutting down: on SIGTERM,
    vLLM 0.32 keeps accepting for ~3 s and answers each new request with HTTP 500 (docs/reliability.md).
    ``$EXIT_CODE`` is set only when the main process has already exited (a crash: nothing to wait
    for); ``$$`` passes a literal ``$`` through systemd's own substitution. '' when DELAY is 0.
    """
    if not delay:
        return ""
    return "/bin/sh -c '[ -n \"$$EXIT_CODE\" ] || exec sleep %d'" % delay


def drift_rows(host, data):
    """Drift rows of the gateway agent.

    ``data``: ``agent`` (plan()), ``changed_paths`` (the file_set call's, in check mode: the
    files it would write), ``exists`` ({path: exists}, read before), ``socket`` (the host
    state's ``{active_state, unit_file_state}`` of llmops-vllm-agent.socket), ``paths`` (the
    agent's files: the ones left behind when it is off).
    """
    agent = data.get("agent") or {}
    exists = data.get("exists") or {}
    sock = data.get("socket") or {}
    rows = []
    if agent.get("on"):
        for path in data.get("changed_paths") or []:
            rows.append(dict(host=host, component="gateway_agent", instance=None, path=path,
                             expected="as rendered by the role",
                             found="missing" if exists.get(path) is False else "hand-edited (differs from the role's)",
                             detail=[]))
        state = "%s/%s" % (sock.get("unit_file_state") or "not-found", sock.get("active_state") or "inactive")
        if state != "enabled/active":
            rows.append(dict(host=host, component="gateway_agent", instance=None, path=UNIT_SOCKET,
                             expected="enabled/active", found=state, detail=[]))
    else:
        left = [p for p in data.get("paths") or [] if exists.get(p)]
        if left or sock.get("active_state") == "active":
            rows.append(dict(host=host, component="gateway_agent", instance=None, path=UNIT_SOCKET,
                             expected="absent (no gateway agent on this host)",
                             found="present: %s" % ", ".join(left or [UNIT_SOCKET]), detail=[]))
    return rows
