# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the gateway role (backends from the inventory, model and key maps, server names)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import gateway


def _wrap(func, *args):
    try:
        return func(*args)
    except gateway.GatewayConfigError as exc:
        raise AnsibleFilterError(str(exc))


def gateway_backends(views, settings):
    """{host: [vllm_view...]} + settings -> checked list of backends."""
    backends = _wrap(gateway.build_backends, views, settings)
    _wrap(gateway.check_settings, backends, settings, views)
    return backends


def gateway_model_map(backends):
    return gateway.model_map(backends)


def gateway_key_map(api_key, api_keys, models, api_key_limits=None, usage=False, api_key_name="default"):
    """keys.map lines (key digests only, with limits and names when any key has limits or usage is counted). Call
    it only from a no_log task or template."""
    return _wrap(gateway.key_map_lines, api_key, api_keys, models, api_key_limits, usage, api_key_name)


def gateway_limits_in_use(api_key, api_keys, api_key_limits=None, field=None):
    """Whether any key has limits (field: that one, e.g. tokens). Call it only from a no_log task."""
    return _wrap(gateway.limits_in_use, api_key, api_keys, api_key_limits, field)


def gateway_key_headers(names):
    """gateway_api_key_headers -> [{header, scheme, skip}] for the template (checked)."""
    return _wrap(gateway.key_headers, names)


def gateway_routing(backends, setting, prefix_bytes=256, balance_factor=125, max_body_bytes=None):
    """Backends with their routing mode (gateway_routing, checked)."""
    return _wrap(gateway.routing, backends, setting, prefix_bytes, balance_factor, max_body_bytes)


def gateway_peers(hosts, hostvars, default_port):
    """[{name, address, port}] of the gateway hosts sharing the per-key counters (checked): each host's
    gateway_peer_address, ansible_host and gateway_peers_port (else ``default_port``) from ``hostvars``."""
    hosts = list(hosts or [])
    hv = dict((h, hostvars[h] if h in hostvars else {}) for h in hosts)
    return _wrap(gateway.peers, hosts,
                 dict((h, hv[h].get("gateway_peer_address", "")) for h in hosts),
                 dict((h, hv[h].get("ansible_host", "")) for h in hosts),
                 dict((h, hv[h].get("gateway_peers_port", default_port)) for h in hosts))


def gateway_server_name(instance, host):
    return gateway.server_name(host, instance)


class FilterModule(object):
    def filters(self):
        return {
            "gateway_backends": gateway_backends,
            "gateway_model_map": gateway_model_map,
            "gateway_key_map": gateway_key_map,
            "gateway_limits_in_use": gateway_limits_in_use,
            "gateway_key_headers": gateway_key_headers,
            "gateway_server_name": gateway_server_name,
            "gateway_routing": gateway_routing,
            "gateway_peers": gateway_peers,
        }
