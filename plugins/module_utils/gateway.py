# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The gateway's backends, model map and key map, built from the inventory.

Pure functions (stdlib only), used by the ``gateway_*`` filters on the
controller and by the vllm_service role's drain/ready calls (server names).

Inputs:
  views: ``{inventory_host: [instance view, ...]}`` where an instance view is
    the ``vllm_view`` contract (fields used here: ``name``, ``served_name``,
    ``served_model_name``, ``host``, ``port``).
  settings: dict with
    gateway_host: inventory name of the gateway host
    upstream_addresses: ``{inventory_host: address}`` (``gateway_upstream_address``
      of each vLLM host, may be empty)
    backends: ``gateway_backends`` (``{served name: ["HOST/INSTANCE", ...]}``),
      empty = every instance of ``views``, grouped by ``served_name``
    frontend_port (int), tls (bool), tls_cert_exists,
    tls_key_exists (bool or None when no TLS)
    agents: ``{inventory_host: {"port", "address"}}`` (``vllm_gateway_agent`` of each vLLM
      host: the vllm_service role's gateway agent; port 0 or absent: none)

Every error raises ``GatewayConfigError`` with the variable and the fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.llmops.serving.plugins.module_utils import ports as port_rule
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode

WILDCARDS = ("0.0.0.0", "::", "")
LOOPBACKS = ("127.0.0.1", "::1", "localhost")
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")


class GatewayConfigError(ValueError):
    """Bad gateway input: the message names the variable and the fix."""


def safe_name(text):
    """An HAProxy-safe identifier (backend/server names): [A-Za-z0-9_.-] only."""
    return _NAME_BAD.sub("_", str(text))


def backend_name(served_name):
    return "m_" + safe_name(served_name)


def server_name(host, instance):
    """The HAProxy server name of instance ``instance`` on inventory host ``host``."""
    return safe_name("%s__%s" % (host, instance))


def _served_names(view):
    names = view.get("served_model_name") or []
    if isinstance(names, str):
        names = [names]
    first = view.get("served_name") or (names[0] if names else view.get("model"))
    out = [str(first)]
    out.extend(str(n) for n in names if str(n) != str(first))
    return out


def _address(host, view, settings):
    """Address the gateway uses for ``view`` on ``host``."""
    bind = str(view.get("host", "127.0.0.1") or "")
    upstream = (settings.get("upstream_addresses") or {}).get(host) or ""
    gateway_host = settings.get("gateway_host")
    if upstream:
        return str(upstream)
    if bind in LOOPBACKS:
        if host == gateway_host:
            return bind if bind != "localhost" else "127.0.0.1"
        raise GatewayConfigError(
            "instance %s on %s binds %s, which the gateway on %s cannot reach: bind it to a private "
            "address (vllm_host / vllm_instances[].host) or set gateway_upstream_address for %s"
            % (view.get("name"), host, bind, gateway_host, host))
    if bind in WILDCARDS:
        raise GatewayConfigError(
            "instance %s on %s binds %s (every interface): set gateway_upstream_address for %s to the "
            "private address the gateway should use (and prefer binding vLLM to that address)"
            % (view.get("name"), host, bind or "''", host))
    return bind


def agent(host, view, settings):
    """The agent-check of one server: ``{"agent_port": P, "agent_addr": A}`` (port 0: no agent).

    The host's gateway agent (``vllm_gateway_agent`` fact, published by vllm_service's view:
    llmops-vllm-agent.socket) answers ``up`` only once ``vllm@NAME`` is active, i.e. after its warmup
    hook; the gateway keeps the server DOWN (requests held by hold.lua) until then, whoever restarted
    it. ``agent_addr`` is the agent's own address when the host set one (vllm_gateway_agent_address),
    '' when it listens on the instance's address."""
    spec = (settings.get("agents") or {}).get(host) or {}
    msg = port_rule.problem("agent", "vllm_gateway_agent_port of %s" % host, spec.get("port") or 0)
    if msg:
        raise GatewayConfigError(msg)
    port = port_rule.as_port(spec.get("port") or 0)
    if _NAME_BAD.search(str(view["name"])):
        port = 0  # HAProxy's agent-send cannot carry it; the agent would refuse it anyway
    return dict(agent_port=port, agent_addr=str(spec.get("address") or "") if port else "")


def _index(views):
    """{"HOST/INSTANCE": (host, view)} of every instance that serves the API
    (the headless parts of spanning instances have none: their head serves it)."""
    out = {}
    for host in sorted(views or {}):
        for view in vllm_multinode.serving(views[host]):
            out["%s/%s" % (host, view["name"])] = (host, view)
    return out


def _adapters(model, members):
    """The LoRA adapters (vllm_view's ``lora_adapters``) every instance of a backend serves: the
    gateway routes their names there. One that only some of them serve cannot be routed (a
    request could reach an instance without it): the error names it and the fix."""
    held = [(host, view, set(a["name"] for a in view.get("lora_adapters") or [])) for host, view in members]
    every = set.intersection(*[h for dummy, dummy2, h in held]) if held else set()
    for host, view, names in held:
        for name in sorted(names - every):
            lacking = ["%s/%s" % (h, v["name"]) for h, v, n in held if name not in n]
            raise GatewayConfigError(
                "LoRA adapter %s is served by %s/%s but not by %s, all behind model %s at the gateway: a request "
                "for it could reach an instance without it. List it in lora_adapters of every instance of %s, or "
                "give those instances their own served_model_name" % (name, host, view["name"], ", ".join(lacking),
                                                                      model, model))
    return sorted(every)


def build_backends(views, settings):
    """The gateway's backends: a sorted list of dicts.

    ``{"name", "model", "aliases" (other served names, and the LoRA adapters every server serves),
    "servers": [{"name", "address", "port", "endpoint", "host", "instance",
    "agent_port", "agent_addr"}]}``: ``agent_port`` (0: none) and ``agent_addr`` ('' = the server's address)
    of the host's gateway agent (``agent()``).
    """
    index = _index(views)
    explicit = settings.get("backends") or {}
    groups = {}
    aliases = {}
    if explicit:
        if not isinstance(explicit, dict):
            raise GatewayConfigError("gateway_backends must be a dict {served model name: [HOST/INSTANCE, ...]}")
        for model, refs in explicit.items():
            if isinstance(refs, str) or not isinstance(refs, (list, tuple)) or not refs:
                raise GatewayConfigError(
                    "gateway_backends[%s] must be a non-empty list of HOST/INSTANCE references" % model)
            for ref in refs:
                if ref not in index:
                    raise GatewayConfigError(
                        "gateway_backends[%s] names %s, which is no instance of the inventory: use "
                        "INVENTORY_HOST/INSTANCE_NAME of a host in the vllm group (known: %s)"
                        % (model, ref, ", ".join(sorted(index)) or "none"))
                groups.setdefault(str(model), []).append(index[ref])
    else:
        for ref in sorted(index):
            host, view = index[ref]
            names = _served_names(view)
            groups.setdefault(names[0], []).append((host, view))
            for alias in names[1:]:
                aliases.setdefault(names[0], set()).add(alias)

    backends = []
    seen_addr = {}
    for model in sorted(groups):
        servers = []
        for host, view in groups[model]:
            address = _address(host, view, settings)
            port = int(view.get("port", 8000))
            key = (address, port)
            if key in seen_addr and seen_addr[key] != (host, view["name"]):
                other = seen_addr[key]
                raise GatewayConfigError(
                    "instances %s/%s and %s/%s both resolve to %s:%d for the gateway: give them distinct "
                    "gateway_upstream_address or ports (vllm_instances[].port)"
                    % (other[0], other[1], host, view["name"], address, port))
            seen_addr[key] = (host, view["name"])
            endpoint = ("[%s]:%d" if ":" in address else "%s:%d") % (address, port)
            servers.append(dict(name=server_name(host, view["name"]), address=address, port=port,
                                endpoint=endpoint, host=host, instance=view["name"],
                                **agent(host, view, settings)))
        backends.append(dict(name=backend_name(model), model=model,
                             aliases=sorted(aliases.get(model, set()) | set(_adapters(model, groups[model]))),
                             servers=servers))
    names = {}
    for b in backends:
        for n in [b["model"]] + b["aliases"]:
            if not n or any(c.isspace() for c in n):
                raise GatewayConfigError(
                    "served model name %r cannot be routed by the gateway (empty or with blanks): "
                    "set served_model_name without blanks" % n)
            if n in names and names[n] != b["name"]:
                raise GatewayConfigError(
                    "served model name %s belongs to two backends (%s, %s): give the instances distinct "
                    "served_model_name values or list them in gateway_backends" % (n, names[n], b["name"]))
            names[n] = b["name"]
    return backends


def model_map(backends):
    """``{served name or alias: backend name}`` (models.map of the gateway)."""
    out = {}
    for b in backends:
        for n in [b["model"]] + b["aliases"]:
            out[n] = b["name"]
    return out


ROUTING_MODES = ("leastconn", "session", "prefix")


def routing(backends, setting, prefix_bytes=256, balance_factor=125, max_body_bytes=None):
    """The backends with each one's ``routing`` (issue 34: cache-aware routing).

    ``setting``: ``gateway_routing``, a mode for every model or ``{served name or alias: mode}``
    (models not listed: leastconn). Modes: ``leastconn`` (fewest connections), ``session`` (a
    conversation sticks: the session header, else the body's ``user``), ``prefix`` (a shared
    prompt prefix sticks: the first ``prefix_bytes`` of the system prompt, first message,
    prompt or input). session and prefix use consistent hashing with bounded load
    (``hash-balance-factor``): a drained or down server's keys move to the others, and no server
    takes more than ``balance_factor`` % of the average load. Requests without a key are
    balanced round robin."""
    def bad(msg):
        raise GatewayConfigError(msg + " (gateway_routing: one of %s, or {MODEL: MODE})" % ", ".join(ROUTING_MODES))

    names = model_map(backends)
    if isinstance(setting, str) or setting is None:
        default, per_model = (setting or "leastconn"), {}
    elif isinstance(setting, dict):
        default, per_model = "leastconn", setting
    else:
        bad("gateway_routing must be a mode or a dict, got %s" % type(setting).__name__)
    if default not in ROUTING_MODES:
        bad("gateway_routing %r is no routing mode" % default)
    modes = {}
    for model, mode in per_model.items():
        if str(model) not in names:
            bad("gateway_routing names %s, which this gateway does not serve (served: %s)"
                % (model, ", ".join(sorted(names)) or "none"))
        if mode not in ROUTING_MODES:
            bad("gateway_routing[%s] %r is no routing mode" % (model, mode))
        backend = names[str(model)]
        if backend in modes and modes[backend] != mode:
            bad("gateway_routing gives %s two modes through its aliases (%s, %s)" % (backend, modes[backend], mode))
        modes[backend] = mode
    try:
        prefix_bytes, balance_factor = int(prefix_bytes), int(balance_factor)
    except (TypeError, ValueError):
        raise GatewayConfigError("gateway_routing_prefix_bytes and gateway_routing_balance_factor must be integers")
    limit = int(max_body_bytes) if max_body_bytes else None
    if prefix_bytes < 1 or (limit and prefix_bytes > limit):
        raise GatewayConfigError("gateway_routing_prefix_bytes must be 1 to gateway_max_body_bytes (%s), got %d"
                                 % (limit, prefix_bytes))
    if balance_factor <= 100:
        raise GatewayConfigError("gateway_routing_balance_factor must be above 100 (HAProxy's hash-balance-factor: a "
                                 "server takes at most that %% of the average load), got %d" % balance_factor)
    out = []
    for b in backends:
        out.append(dict(b, routing=modes.get(b["name"], default)))
    return out


def check_settings(backends, settings, views):
    """Port clash / TLS files / empty fleet, before anything changes."""
    if not backends and settings.get("require_backends", True):
        raise GatewayConfigError(
            "the gateway has no backend: no host of the vllm group publishes an instance (vllm_view) "
            "and gateway_backends is empty; add vLLM hosts or list instances in gateway_backends")
    msg = port_rule.problem("gateway", "gateway_port", settings.get("frontend_port"))
    if msg:
        raise GatewayConfigError(msg)
    port = port_rule.as_port(settings.get("frontend_port"))
    gw = settings.get("gateway_host")
    for view in (views or {}).get(gw) or []:
        if int(view.get("port", 8000)) == port:
            raise GatewayConfigError(
                "gateway_port %d clashes with vLLM instance %s on the gateway host %s: pick another gateway_port "
                "or move the instance (vllm_instances[].port)" % (port, view.get("name"), gw))
    if settings.get("tls"):
        for var, ok in (("gateway_tls_cert", settings.get("tls_cert_exists")),
                        ("gateway_tls_key", settings.get("tls_key_exists"))):
            if not ok:
                raise GatewayConfigError(
                    "%s is set but the file %s does not exist on the controller: give the PEM path "
                    "(or empty gateway_tls_cert and gateway_tls_key for plain HTTP)" % (var, settings.get(var)))


# The request headers a client may present its key in, and the scheme before
# the key in each. OpenAI clients, curl, the Anthropic SDK 2.x (``api_key`` and
# ``auth_token``) and Claude Code's ANTHROPIC_AUTH_TOKEN send ``Authorization:
# Bearer KEY`` (the scheme is case-insensitive, as in vLLM's own check); Claude
# Code's ANTHROPIC_API_KEY sends ``x-api-key: KEY`` (the Anthropic API's header).
KEY_HEADERS = {"authorization": "Bearer ", "x-api-key": ""}


def key_headers(names):
    """The headers the gateway reads a key from (``gateway_api_key_headers``), in order.

    Returns ``[{"header", "scheme", "skip"}]`` for the template: the first header
    of the list that carries a key (present, and with its scheme) is the one
    digested and checked; the others are not looked at. ``skip`` is the length
    of the scheme (the bytes before the key).
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names:
        raise GatewayConfigError(
            "gateway_api_key_headers must be a non-empty list of header names (known: %s)"
            % ", ".join(sorted(KEY_HEADERS)))
    out = []
    for name in names:
        header = str(name).strip().lower()
        if header not in KEY_HEADERS:
            raise GatewayConfigError(
                "gateway_api_key_headers names %s, which the gateway cannot read a key from: use %s"
                % (name, " and/or ".join(sorted(KEY_HEADERS))))
        if header in [h["header"] for h in out]:
            raise GatewayConfigError("gateway_api_key_headers names %s twice" % header)
        out.append(dict(header=header, scheme=KEY_HEADERS[header], skip=len(KEY_HEADERS[header])))
    return out


def key_digest(key):
    return hashlib.sha256(str(key).encode("utf-8")).hexdigest()


LIMIT_FIELDS = ("requests", "concurrent", "tokens", "period")
NO_LIMITS = (0, 0, 0, 0)
PERIODS = {"minute": 60, "hour": 3600, "day": 86400, "week": 604800}
# A key's name: a Prometheus label value and the last field of its key-map value.
_KEY_NAME = re.compile(r"^[A-Za-z0-9_.:@#-]{1,64}$")
LIMITS_SHAPE = "{requests: N, concurrent: N, tokens: N, period: day|hour|minute|week|SECONDS}"


def _period(value, where):
    """A token quota's period: day, hour, minute, week or seconds (1 to 604800) -> seconds."""
    if isinstance(value, str) and value in PERIODS:
        return PERIODS[value]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 604800:
        raise GatewayConfigError("%s.period must be one of %s or a whole number of seconds from 1 to 604800, got %r"
                                 % (where, ", ".join(PERIODS), value))
    return value


def _limits(value, where):
    """A key's limits -> (requests, concurrent, tokens, period seconds); 0 = none.

    ``requests`` per gateway_limit_window_s, ``concurrent`` requests in flight, ``tokens``
    (prompt + completion, from vLLM's usage) per ``period`` (default day; periods start at
    multiples of it since the epoch: a day at 00:00 UTC)."""
    if value in (None, {}):
        return NO_LIMITS
    if not isinstance(value, dict):
        raise GatewayConfigError("%s must be a dict %s, got %s" % (where, LIMITS_SHAPE, type(value).__name__))
    unknown = sorted(set(value) - set(LIMIT_FIELDS))
    if unknown:
        hint = ""
        if any(k in ("rpm", "requests_per_minute", "rate", "max_requests") for k in unknown):
            hint = " (requests counts per gateway_limit_window)"
        if any("token" in k for k in unknown):
            hint = " (a token quota is tokens: N with period: day, hour, minute, week or seconds)"
        raise GatewayConfigError("%s has unknown keys %s: use %s%s" % (where, ", ".join(unknown), LIMITS_SHAPE, hint))
    out = []
    for field in LIMIT_FIELDS[:3]:
        v = value.get(field, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GatewayConfigError("%s.%s must be a whole number >= 0 (0: no limit), got %r" % (where, field, v))
        out.append(v)
    if "period" in value and not out[2]:
        raise GatewayConfigError("%s.period is set without tokens: give tokens: N (the quota per period), or drop "
                                 "period" % where)
    if out[2] >= 2 ** 31:
        raise GatewayConfigError("%s.tokens must be below 2147483648 (HAProxy counts it in a 32-bit gpt0), got %d"
                                 % (where, out[2]))
    out.append(_period(value.get("period", "day"), where) if out[2] else 0)
    return tuple(out)


def _key_name(name, where):
    if not isinstance(name, str) or not _KEY_NAME.match(name):
        raise GatewayConfigError("%s.name must be 1-64 characters of [A-Za-z0-9_.:@#-] (it labels the key's usage "
                                 "metrics; never the key itself), got %r" % (where, name))
    return name


def _key_entries(model, keys):
    """gateway_api_keys[model]: a key, or a list of keys and {key, name, limits} entries -> [(key, name, limits)].

    ``name`` (default ``MODEL#INDEX``) labels the key's usage; it is no secret."""
    if isinstance(keys, (str, dict)):
        keys = [keys]
    out = []
    for i, entry in enumerate(keys or []):
        where = "gateway_api_keys[%s][%d]" % (model, i)
        name = "%s#%d" % (safe_name(model), i)
        if isinstance(entry, dict):
            unknown = sorted(set(entry) - {"key", "name", "limits"})
            if unknown:
                raise GatewayConfigError("%s has unknown keys %s: an entry is {key: KEY, name: NAME, limits: %s}"
                                         % (where, ", ".join(unknown), LIMITS_SHAPE))
            k, limits = entry.get("key"), _limits(entry.get("limits"), where + ".limits")
            if "name" in entry:
                name = _key_name(entry["name"], where)
        else:
            k, limits = entry, NO_LIMITS
        if not k:
            raise GatewayConfigError("gateway_api_keys[%s] holds an empty key" % model)
        if any(c.isspace() for c in str(k)):
            raise GatewayConfigError("gateway_api_keys[%s] holds a key with blanks (not usable in an Authorization or "
                                     "x-api-key header)" % model)
        out.append((str(k), name, limits))
    return out


def _all_entries(api_key, api_keys, api_key_limits, api_key_name):
    """[(scope suffix, key, name, limits)] of gateway_api_key (scope ``*``) and every gateway_api_keys entry."""
    out = []
    if api_key:
        out.append(("*", str(api_key), _key_name(api_key_name, "gateway_api_key_name") if api_key_name else "default",
                    _limits(api_key_limits, "gateway_api_key_limits")))
    elif api_key_limits:
        raise GatewayConfigError("gateway_api_key_limits is set but gateway_api_key is empty: set the key, or give the "
                                 "limits on entries of gateway_api_keys ({key: KEY, limits: {...}})")
    for model, keys in (api_keys or {}).items():
        out.extend((str(model), k, name, limits) for k, name, limits in _key_entries(model, keys))
    return out


def key_map_lines(api_key, api_keys, models, api_key_limits=None, usage=False, api_key_name="default"):
    """keys.map lines ``SHA256:MODEL VALUE``: one per (key, model) the key may use.

    Every key also gets ``SHA256: 1`` (a known key: requests without a model,
    such as ``GET /v1/models``).
    ``api_key`` (gateway_api_key) may use every model (``*``); ``api_keys``
    (gateway_api_keys) is ``{model: key or [keys or {key, name, limits}]}``. Only digests are
    written, so the map never holds a key.
    VALUE is ``1``, or, when any key has limits (gateway_api_key_limits, an entry's
    ``limits``) or ``usage`` is counted, ``REQUESTS/CONCURRENT/TOKENS/PERIOD/NAME`` on every
    ``SHA256:MODEL`` and ``SHA256:*`` line (0: no limit): the gateway counts per line, so a
    key's limits hold for what the line grants (every model, or that model); NAME labels
    the usage it counts.
    """
    entries = {}
    known = set()
    for model, k, name, limits in _all_entries(api_key, api_keys, api_key_limits, api_key_name):
        if model != "*" and model not in models:
            raise GatewayConfigError(
                "gateway_api_keys names model %s, which no backend serves (served: %s): use a served model name"
                % (model, ", ".join(sorted(models)) or "none"))
        scope = "%s:%s" % (key_digest(k), model)
        if scope in entries and entries[scope] != (limits, name):
            raise GatewayConfigError("gateway_api_keys[%s] lists the same key twice with different limits or names"
                                     % model)
        entries[scope] = (limits, name)
        known.add(key_digest(k))
    rich = usage or limits_in_use(api_key, api_keys, api_key_limits)
    lines = set("%s %s" % (scope, "%d/%d/%d/%d/%s" % (v + (name,)) if rich else "1")
                for scope, (v, name) in entries.items())
    lines.update("%s: 1" % d for d in known)
    return sorted(lines)


def limits_in_use(api_key, api_keys, api_key_limits=None, field=None):
    """Whether any key has limits (``field``: that limit, e.g. ``tokens``): the template renders the limit rules
    only then. The same entries key_map_lines reads, not its output parsed back."""
    entries = _all_entries(api_key, api_keys, api_key_limits, "default")
    if field is None:
        return any(limits[:3] != (0, 0, 0) for dummy, dummy2, dummy3, limits in entries)
    index = LIMIT_FIELDS.index(field)
    return any(limits[index] for dummy, dummy2, dummy3, limits in entries)


def quota_periods(api_key, api_keys, api_key_limits=None):
    """The longest token-quota period (seconds; 0: no quota): the quota table's entries outlive it."""
    return max([limits[3] for dummy, dummy2, dummy3, limits in _all_entries(api_key, api_keys, api_key_limits, "default")]
               + [0])


def peers(hosts, addresses, ansible_hosts, ports):
    """The gateway hosts that share the per-key counters (HAProxy ``peers``): ``[{name, address, port}]``.
    ``addresses``, ``ansible_hosts``, ``ports``: ``{host: gateway_peer_address}``, ``{host: ansible_host}``,
    ``{host: gateway_peers_port}`` (the address: gateway_peer_address, else ansible_host, else the name)."""
    out, seen = [], {}
    for h in hosts:
        name = str(h)
        if _NAME_BAD.search(name):
            raise GatewayConfigError("gateway host %s cannot be an HAProxy peer name (use [A-Za-z0-9_.-] in the "
                                     "inventory name)" % name)
        address = str(addresses.get(h) or ansible_hosts.get(h) or name)
        msg = port_rule.problem("gateway", "gateway_peers_port of %s" % name, ports.get(h))
        if msg:
            raise GatewayConfigError(msg)
        port = port_rule.as_port(ports.get(h))
        if (address, port) in seen:
            raise GatewayConfigError("gateway hosts %s and %s both use %s:%d for HAProxy peers: set gateway_peer_address "
                                     "or gateway_peers_port per host" % (seen[(address, port)], name, address, port))
        seen[(address, port)] = name
        out.append(dict(name=name, address=address, port=port))
    return out
