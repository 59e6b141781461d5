# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Ray cluster membership from `ray status` and the cross-node check of a
spanning instance (docs: ray_membership.yml, vllm_nodes_compare.yml), the
ports the nodes must reach before any change (vllm_port_*.yml).
The rules are in module_utils/vllm_multinode.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode


def ray_membership(status_text, expected):
    if not isinstance(expected, dict):
        raise AnsibleFilterError("ray_membership expects {node: {resource: amount}}, got %s"
                                 % type(expected).__name__)
    return vllm_multinode.membership(expected, vllm_multinode.parse_ray_status(status_text or ""))


def ray_nodes_health(spanning, hostvars):
    """_ray_spanning of a node -> {instance: {states, missing}} of the instances it heads."""
    return vllm_multinode.nodes_health(list(spanning or []), hostvars)


def ray_recovering(spanning, hostvars):
    """_ray_spanning of a node -> its parts of the instances whose head named a node down."""
    return vllm_multinode.recovering(list(spanning or []), hostvars)


def vllm_nodes_compare(instance, facts_by_node):
    """instance: a vllm_view entry; facts_by_node: {node: vllm_node_facts}."""
    model = instance.get("model")
    facts = {}
    for node in instance.get("nodes") or []:
        f = (facts_by_node or {}).get(node) or {}
        if not f:
            facts[node] = {"vllm_version": "unknown (no facts: is the node in the play?)", "venv": None, "model": {}}
            continue
        facts[node] = {"vllm_version": f.get("vllm_version"), "venv": f.get("venv"),
                       "model": (f.get("models") or {}).get(model) or {}}
    problems = vllm_multinode.compare_nodes(instance.get("name"), facts)
    for node in instance.get("nodes") or []:
        problems += vllm_multinode.interface_problems(instance.get("name"), node, (facts_by_node or {}).get(node) or {})
    return problems


def vllm_spanning_instances(view):
    """vllm_view -> its entries that span hosts (``nodes``)."""
    if view is not None and not isinstance(view, list):
        raise AnsibleFilterError("vllm_spanning_instances expects a vllm_view (a list), got %s" % type(view).__name__)
    return vllm_multinode.spanning(view)


def vllm_spanning_restarts(view, changed_by_node):
    """vllm_view + {node: [changed instance names]} -> the spanning instances to restart on this node."""
    if not isinstance(changed_by_node, dict):
        raise AnsibleFilterError("vllm_spanning_restarts expects {node: [instance names]}, got %s"
                                 % type(changed_by_node).__name__)
    return vllm_multinode.spanning_restarts(view, changed_by_node)


def vllm_port_checks(view):
    """vllm_view -> the ports the nodes of its spanning instances must reach."""
    return vllm_multinode.port_checks(view)


def vllm_port_listen_args(checks, host):
    """The listener's ADDRESS,PORT,PEERS arguments for the checks ``host`` owns."""
    return ["%s,%d" % (vllm_multinode.port_key(c), len(c.get("peers") or []))
            for c in checks or [] if c.get("owner") == host]


def vllm_port_problems(checks, host, listened, reached):
    """``reached``: the results of the wait_for loop (one per check of which
    ``host`` is a peer, in order)."""
    errors = {}
    for r in reached or []:
        c = r.get("item") or {}
        # wait_for returns `state` when it connected (failed_when: false keeps `failed` false)
        if r.get("failed") or ("state" not in r and not r.get("skipped")):
            errors[vllm_multinode.port_key(c)] = r.get("msg") or "not reachable"
    return vllm_multinode.port_problems(checks, host, listened or {}, errors)


def vllm_batch_problems(views, batch, play_hosts):
    """views: {host: vllm_view}; batch: ansible_play_batch; play_hosts: ansible_play_hosts_all."""
    if not isinstance(views, dict):
        raise AnsibleFilterError("vllm_batch_problems expects {host: vllm_view}, got %s" % type(views).__name__)
    return vllm_multinode.batch_problems(views, batch, play_hosts)


class FilterModule(object):
    def filters(self):
        return {"ray_membership": ray_membership, "vllm_nodes_compare": vllm_nodes_compare,
                "vllm_port_checks": vllm_port_checks, "vllm_port_listen_args": vllm_port_listen_args,
                "vllm_port_problems": vllm_port_problems, "vllm_batch_problems": vllm_batch_problems,
                "vllm_spanning_instances": vllm_spanning_instances,
                "vllm_spanning_restarts": vllm_spanning_restarts,
                "ray_nodes_health": ray_nodes_health, "ray_recovering": ray_recovering}
