"""The gateway's backends, model map and key map (plugins/module_utils/gateway.py)."""
import os
import re

import jinja2
import pytest

from conftest import ROOT

from ansible_collections.llmops.serving.plugins.module_utils import gateway as gw


def view(name="default", served="tiny", host="127.0.0.1", port=8000, aliases=()):
    return dict(name=name, served_name=served, served_model_name=[served] + list(aliases), host=host, port=port,
                model="/srv/models/tiny")


FLEET = {"n1": [view(port=8301)], "n2": [view(port=8302)], "n3": [view(name="big", served="big", port=8303)]}
SETTINGS = dict(gateway_host="gw", upstream_addresses={"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"},
                frontend_port=8080, tls=False)


def test_one_backend_per_served_model_with_servers_from_every_host():
    backends = gw.build_backends(FLEET, SETTINGS)
    assert [b["name"] for b in backends] == ["m_big", "m_tiny"]
    tiny = backends[1]
    assert [(s["name"], s["address"], s["port"]) for s in tiny["servers"]] == [
        ("n1__default", "10.0.0.1", 8301), ("n2__default", "10.0.0.2", 8302)]
    assert gw.model_map(backends) == {"big": "m_big", "tiny": "m_tiny"}


def test_aliases_route_to_the_first_served_name():
    fleet = {"n1": [view(aliases=("tiny-latest",))]}
    backends = gw.build_backends(fleet, dict(SETTINGS, upstream_addresses={"n1": "10.0.0.1"}))
    assert gw.model_map(backends) == {"tiny": "m_tiny", "tiny-latest": "m_tiny"}


def test_unknown_instance_in_a_backend_names_the_variable():
    with pytest.raises(gw.GatewayConfigError, match=r"gateway_backends\[tiny\] names n9/default"):
        gw.build_backends(FLEET, dict(SETTINGS, backends={"tiny": ["n1/default", "n9/default"]}))


def test_explicit_backends_use_only_the_listed_instances():
    backends = gw.build_backends(FLEET, dict(SETTINGS, backends={"tiny": ["n2/default"]}))
    assert [(b["name"], [s["name"] for s in b["servers"]]) for b in backends] == [("m_tiny", ["n2__default"])]


def test_loopback_bind_on_another_host_is_refused_without_an_upstream_address():
    with pytest.raises(gw.GatewayConfigError, match="gateway_upstream_address for n1"):
        gw.build_backends({"n1": [view()]}, dict(SETTINGS, upstream_addresses={}))


def test_wildcard_bind_needs_an_upstream_address():
    with pytest.raises(gw.GatewayConfigError, match="every interface"):
        gw.build_backends({"n1": [view(host="0.0.0.0")]}, dict(SETTINGS, upstream_addresses={}))


def test_loopback_on_the_gateway_host_itself_is_fine():
    backends = gw.build_backends({"gw": [view()]}, dict(SETTINGS, upstream_addresses={}))
    assert backends[0]["servers"][0]["address"] == "127.0.0.1"


def test_two_instances_on_one_address_and_port_are_refused():
    fleet = {"n1": [view(port=8301)], "n2": [view(port=8301)]}
    with pytest.raises(gw.GatewayConfigError, match="both resolve to 127.0.0.1:8301"):
        gw.build_backends(fleet, dict(SETTINGS, upstream_addresses={"n1": "127.0.0.1", "n2": "127.0.0.1"}))


def test_port_clash_with_an_instance_on_the_gateway_host():
    fleet = {"gw": [view(port=8080)]}
    backends = gw.build_backends(fleet, dict(SETTINGS, upstream_addresses={}))
    with pytest.raises(gw.GatewayConfigError, match="gateway_port 8080 clashes with vLLM instance default"):
        gw.check_settings(backends, SETTINGS, fleet)


def test_missing_cert_names_the_variable():
    backends = gw.build_backends(FLEET, SETTINGS)
    settings = dict(SETTINGS, tls=True, gateway_tls_cert="/nope.crt", tls_cert_exists=False,
                    gateway_tls_key="/k", tls_key_exists=True)
    with pytest.raises(gw.GatewayConfigError, match="gateway_tls_cert is set but the file /nope.crt"):
        gw.check_settings(backends, settings, FLEET)


def test_no_backend_at_all_is_refused():
    with pytest.raises(gw.GatewayConfigError, match="no backend"):
        gw.check_settings([], SETTINGS, {})


def test_blank_in_a_served_name_is_refused():
    with pytest.raises(gw.GatewayConfigError, match="blanks"):
        gw.build_backends({"n1": [view(served="my model")]}, SETTINGS)


def test_key_map_holds_digests_only_and_per_model_entries():
    lines = gw.key_map_lines("all-key", {"tiny": ["k1", "k2"]}, {"tiny": "m_tiny", "big": "m_big"})
    text = "\n".join(lines)
    for secret in ("all-key", "k1", "k2"):
        assert secret not in text
    assert "%s:* 1" % gw.key_digest("all-key") in lines
    assert "%s:tiny 1" % gw.key_digest("k1") in lines
    assert "%s: 1" % gw.key_digest("k2") in lines
    assert not any(line.startswith(gw.key_digest("k1") + ":big") for line in lines)


def test_key_for_an_unknown_model_is_refused():
    with pytest.raises(gw.GatewayConfigError, match="gateway_api_keys names model nope"):
        gw.key_map_lines("", {"nope": "k"}, {"tiny": "m_tiny"})


def test_server_names_are_haproxy_safe():
    assert gw.server_name("node-1.example", "my inst") == "node-1.example__my_inst"
    assert gw.backend_name("org/model:v1") == "m_org_model_v1"


def test_the_headless_part_of_a_spanning_instance_is_no_server():
    """Its node runs ranks only: the head's instance is the server of the model."""
    fleet = {"n1": [dict(view(port=8301), nodes=["n1", "n2"], serves_http=True)],
             "n2": [dict(view(port=8301), nodes=["n1", "n2"], serves_http=False)]}
    backends = gw.build_backends(fleet, SETTINGS)
    assert [(s["name"], s["address"]) for s in backends[0]["servers"]] == [("n1__default", "10.0.0.1")]


def test_key_headers_default_order_bearer_first_then_x_api_key():
    assert gw.key_headers(["authorization", "x-api-key"]) == [
        dict(header="authorization", scheme="Bearer ", skip=7), dict(header="x-api-key", scheme="", skip=0)]
    assert gw.key_headers(["X-Api-Key"]) == [dict(header="x-api-key", scheme="", skip=0)]


@pytest.mark.parametrize("names, message", [
    ([], "must be a non-empty list"),
    ("x-api-key", "must be a non-empty list"),
    (["authorization", "api-key"], "names api-key, which the gateway cannot read a key from: use authorization and/or x-api-key"),
    (["x-api-key", "X-API-KEY"], "names x-api-key twice"),
])
def test_bad_key_headers_name_the_variable(names, message):
    with pytest.raises(gw.GatewayConfigError, match="gateway_api_key_headers " + re.escape(message)):
        gw.key_headers(names)


def _key_lines(names):
    """The template's key lines (roles/gateway/templates/haproxy.cfg.j2) rendered for NAMES."""
    with open(os.path.join(ROOT, "roles", "gateway", "templates", "haproxy.cfg.j2"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("{% for h in gateway_config.key_headers %}")
    block = text[start:text.index("{% endfor %}", start) + len("{% endfor %}")]
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)
    return env.from_string(block).render(gateway_config=dict(key_headers=gw.key_headers(names))).strip().splitlines()


def test_the_template_digests_the_first_header_that_carries_a_key():
    assert [line.strip() for line in _key_lines(["authorization", "x-api-key"])] == [
        'http-request set-var(txn.kd) req.hdr(authorization),bytes(7),sha2(256),hex,lower'
        ' if !{ var(txn.kd) -m found } { req.hdr(authorization) -m beg -i "Bearer " }',
        'http-request set-var(txn.kd) req.hdr(x-api-key),sha2(256),hex,lower'
        ' if !{ var(txn.kd) -m found } { req.hdr(x-api-key) -m found }']
    assert len(_key_lines(["authorization"])) == 1


def test_routing_per_model_by_name_or_alias_others_leastconn():
    fleet = {"n1": [view(aliases=("tiny-latest",), port=8301), view(name="big", served="big", port=8303)]}
    backends = gw.build_backends(fleet, dict(SETTINGS, upstream_addresses={"n1": "10.0.0.1"}))
    routed = gw.routing(backends, {"tiny-latest": "session"})
    assert {b["name"]: b["routing"] for b in routed} == {"m_big": "leastconn", "m_tiny": "session"}
    assert sorted(set(b["routing"] for b in routed) - {"leastconn"}) == ["session"]
    assert {b["routing"] for b in gw.routing(backends, "prefix")} == {"prefix"}
    assert set(b["routing"] for b in gw.routing(backends, "leastconn")) == {"leastconn"}


@pytest.mark.parametrize("setting,kwargs,message", [
    ({"tiny": "session", "tiny-latest": "prefix"}, {}, "gives m_tiny two modes through its aliases"),
    (["session"], {}, "must be a mode or a dict"),
    ("session", {"balance_factor": 100}, "gateway_routing_balance_factor must be above 100"),
    ("prefix", {"prefix_bytes": 0}, "gateway_routing_prefix_bytes must be 1 to gateway_max_body_bytes"),
    ("prefix", {"prefix_bytes": 5000, "max_body_bytes": 4096}, "gateway_routing_prefix_bytes must be 1 to"),
])
def test_bad_routing_names_the_variable(setting, kwargs, message):
    fleet = {"n1": [view(aliases=("tiny-latest",), port=8301)]}
    backends = gw.build_backends(fleet, dict(SETTINGS, upstream_addresses={"n1": "10.0.0.1"}))
    with pytest.raises(gw.GatewayConfigError, match=message):
        gw.routing(backends, setting, **kwargs)


def test_key_lines_carry_limits_only_when_a_key_has_some():
    models = {"tiny": "m_tiny", "big": "m_big"}
    plain = gw.key_map_lines("all-key", {"tiny": ["k1"]}, models)
    assert all(line.endswith(" 1") for line in plain) and not gw.limits_in_use("all-key", {"tiny": ["k1"]})
    lines = gw.key_map_lines("all-key", {"tiny": ["k1", {"key": "k2", "limits": {"concurrent": 2}}]}, models,
                             {"requests": 100})
    d = gw.key_digest
    assert "%s:* 100/0/0/0/default" % d("all-key") in lines and "%s:tiny 0/2/0/0/tiny#1" % d("k2") in lines
    assert "%s:tiny 0/0/0/0/tiny#0" % d("k1") in lines and "%s: 1" % d("k2") in lines
    assert gw.limits_in_use("", {"tiny": ["k1", {"key": "k2", "limits": {"concurrent": 2}}]})
    assert not any("k2" in line or "all-key" in line for line in lines)


def test_token_quotas_and_names_go_in_the_key_lines():
    models = {"tiny": "m_tiny"}
    keys = {"tiny": [{"key": "k1", "name": "team-a", "limits": {"tokens": 5000, "period": "hour"}},
                     {"key": "k2", "limits": {"tokens": 10}}, "k3"]}
    lines = gw.key_map_lines("", keys, models)
    d = gw.key_digest
    assert "%s:tiny 0/0/5000/3600/team-a" % d("k1") in lines and "%s:tiny 0/0/10/86400/tiny#1" % d("k2") in lines
    assert "%s:tiny 0/0/0/0/tiny#2" % d("k3") in lines
    assert gw.limits_in_use("", keys, None, "tokens") and not gw.limits_in_use("", {"tiny": ["k"]}, None, "tokens")
    assert not gw.limits_in_use("", keys, None, "requests")
    # Usage counted without limits: names, no limits; without either: the plain map of before.
    named = gw.key_map_lines("all", {"tiny": ["k3"]}, models, None, True, "ops")
    assert "%s:* 0/0/0/0/ops" % d("all") in named and "%s:tiny 0/0/0/0/tiny#0" % d("k3") in named
    assert all(line.endswith(" 1") for line in gw.key_map_lines("all", {"tiny": ["k3"]}, models))


@pytest.mark.parametrize("api_keys,limits,message", [
    ({"tiny": [{"key": "k", "limits": {"tokens_per_day": 10}}]}, None,
     r"gateway_api_keys\[tiny\]\[0\].limits has unknown keys tokens_per_day.*a token quota is tokens: N with period"),
    ({"tiny": [{"key": "k", "limits": {"requests": -1}}]}, None, r"gateway_api_keys\[tiny\]\[0\].limits.requests"),
    ({"tiny": [{"key": "k", "nick": "team"}]}, None, r"gateway_api_keys\[tiny\]\[0\] has unknown keys nick"),
    ({"tiny": [{"key": "k", "name": "team a"}]}, None, r"gateway_api_keys\[tiny\]\[0\].name must be 1-64"),
    ({"tiny": [{"key": "k", "limits": {"tokens": 10, "period": "fortnight"}}]}, None,
     r"gateway_api_keys\[tiny\]\[0\].limits.period must be one of minute, hour, day, week"),
    ({"tiny": [{"key": "k", "limits": {"tokens": 10, "period": 0}}]}, None, r"limits.period .* 1 to 604800"),
    ({"tiny": [{"key": "k", "limits": {"period": "day"}}]}, None, r"limits.period is set without tokens"),
    ({"tiny": [{"key": "k", "limits": {"tokens": 2 ** 31}}]}, None, r"limits.tokens must be below 2147483648"),
    ({"tiny": [{"key": "k", "limits": {"tokens": "lots"}}]}, None, r"\[0\].limits.tokens must be a whole number"),
    ({"tiny": [{"key": "k", "limits": {"requests": 1}}, {"key": "k", "limits": {"requests": 2}}]}, None,
     "the same key twice with different limits"),
])
def test_bad_limits_name_the_variable(api_keys, limits, message):
    with pytest.raises(gw.GatewayConfigError, match=message):
        gw.key_map_lines("", api_keys, {"tiny": "m_tiny"}, limits)


def test_global_key_limits_need_the_global_key():
    with pytest.raises(gw.GatewayConfigError, match="gateway_api_key_limits is set but gateway_api_key is empty"):
        gw.key_map_lines("", {"tiny": "k"}, {"tiny": "m_tiny"}, {"requests": 5})


def test_peers_from_the_gateway_hosts():
    assert gw.peers(["gw1", "gw2"], {"gw2": "10.0.0.9"}, {"gw1": "10.0.0.1", "gw2": "10.0.0.2"},
                    {"gw1": 10000, "gw2": "10001"}) == [
        {"name": "gw1", "address": "10.0.0.1", "port": 10000}, {"name": "gw2", "address": "10.0.0.9", "port": 10001}]
    with pytest.raises(gw.GatewayConfigError, match="both use 10.0.0.1:10000 for HAProxy peers"):
        gw.peers(["gw1", "gw2"], {}, {"gw1": "10.0.0.1", "gw2": "10.0.0.1"}, {"gw1": 10000, "gw2": 10000})
    with pytest.raises(gw.GatewayConfigError, match="gateway_peers_port of gw1 must be a TCP port"):
        gw.peers(["gw1"], {}, {}, {"gw1": 70000})


def test_the_allowlist_never_passes_vllm_dev_routes():
    """The frontend denies (404) every path but /v1/* and /health before any backend: vLLM's dev-mode routes
    (sleep mode: VLLM_SERVER_DEV_MODE=1) answer without a key, so they must never pass (live: molecule/drift)."""
    with open(os.path.join(ROOT, "roles", "gateway", "templates", "haproxy.cfg.j2")) as f:
        text = f.read()
    acls = dict((m.group(1), (m.group(2), m.group(3))) for m in re.finditer(r"^\s*acl (p_\w+) (path\w*) (.+)$", text, re.M))
    assert acls["p_v1"] == ("path_beg", "/v1/") and acls["p_health"] == ("path", "/health")
    unless = re.findall(r"^\s*http-request deny deny_status 404 unless (.+)$", text, re.M)
    assert unless == ["p_v1 or p_health"]
    deny = text.index("http-request deny deny_status 404 unless")
    assert deny < text.index("use_backend") and deny < text.index("http-request set-var(txn.model)")
    assert not re.search(r"^\s*http-request allow", text, re.M)
    for path in ("/sleep", "/wake_up", "/is_sleeping", "/collective_rpc", "/server_info", "/reset_prefix_cache"):
        assert not path.startswith("/v1/") and path != "/health"


def test_servers_of_a_host_with_a_gateway_agent_get_its_port_and_address():
    agents = {"n1": {"port": 8391}, "n2": {"port": 8392, "address": "10.0.1.2"}, "n3": {"port": 0}}
    backends = gw.build_backends(FLEET, dict(SETTINGS, agents=agents))
    servers = {s["host"]: s for b in backends for s in b["servers"]}
    assert (servers["n1"]["agent_port"], servers["n1"]["agent_addr"]) == (8391, "")
    assert (servers["n2"]["agent_port"], servers["n2"]["agent_addr"]) == (8392, "10.0.1.2")
    assert (servers["n3"]["agent_port"], servers["n3"]["agent_addr"]) == (0, "")


def test_no_agents_setting_means_no_agent_check():
    backends = gw.build_backends(FLEET, SETTINGS)
    assert {s["agent_port"] for b in backends for s in b["servers"]} == {0}


def test_a_bad_agent_port_names_the_variable():
    with pytest.raises(gw.GatewayConfigError, match=r"vllm_gateway_agent_port of n1 must be a TCP port in 1\.\.65535, or 0 for none \(got 70000\)"):
        gw.build_backends(FLEET, dict(SETTINGS, agents={"n1": {"port": 70000}}))


def test_the_template_renders_agent_check_only_for_servers_with_an_agent():
    with open(os.path.join(ROOT, "roles", "gateway", "templates", "haproxy.cfg.j2"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("{% for server in backend.servers %}")
    block = text[start:text.index("{% endfor %}", start) + len("{% endfor %}")]
    backend = dict(servers=gw.build_backends(FLEET, dict(SETTINGS, agents={"n1": {"port": 8391},
                                                                           "n2": {"port": 8392, "address": "10.9.9.9"}}))[1]["servers"])
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)
    lines = [x.strip() for x in env.from_string(block).render(backend=backend, gateway_health_interval="2s").splitlines()
             if x.strip().startswith("server ")]
    assert lines == [
        'server n1__default 10.0.0.1:8301 check agent-check agent-port 8391 agent-send "default\\n" agent-inter 2s',
        'server n2__default 10.0.0.2:8302 check agent-check agent-port 8392 agent-addr 10.9.9.9 agent-send "default\\n" '
        'agent-inter 2s']
    backend = dict(servers=gw.build_backends(FLEET, SETTINGS)[1]["servers"])
    lines = [x.strip() for x in env.from_string(block).render(backend=backend, gateway_health_interval="2s").splitlines()
             if x.strip().startswith("server ")]
    assert lines == ["server n1__default 10.0.0.1:8301 check", "server n2__default 10.0.0.2:8302 check"]


def test_peers_filter_reads_each_host_from_hostvars(tmp_path):
    """gateway_peers(hosts, hostvars, default_port) in a real play: gateway_peer_address, else ansible_host,
    else the name; a host's own gateway_peers_port, else the default."""
    from conftest import run_tasks
    inv = {"gw1": {"ansible_host": "10.0.0.1"},
           "gw2": {"ansible_host": "10.0.0.2", "gateway_peer_address": "10.0.0.9", "gateway_peers_port": 10001}}
    tasks = [{"ansible.builtin.add_host": dict(v, name=h, groups="gw")} for h, v in inv.items()]
    tasks.append({"ansible.builtin.debug": {
        "msg": "{{ groups['gw'] | llmops.serving.gateway_peers(hostvars, 10000) }}"}})
    got = run_tasks(tmp_path, tasks)[-1]["msg"]
    assert got == [{"name": "gw1", "address": "10.0.0.1", "port": 10000}, {"name": "gw2", "address": "10.0.0.9", "port": 10001}]


def test_lora_adapters_route_to_the_instances_that_serve_them():
    """Issue 33 item 2: an adapter every instance of a model serves is routed there by its name."""
    def lora(v, *names):
        return dict(v, lora_adapters=[{"name": n, "path": "/srv/lora/" + n, "base": None} for n in names])
    fleet = {"n1": [lora(view(port=8301), "sql", "chat")], "n2": [lora(view(port=8302), "sql", "chat")],
             "n3": [view(name="big", served="big", port=8303)]}
    backends = gw.build_backends(fleet, SETTINGS)
    assert gw.model_map(backends) == {"big": "m_big", "tiny": "m_tiny", "sql": "m_tiny", "chat": "m_tiny"}
    fleet["n2"] = [lora(view(port=8302), "sql")]
    with pytest.raises(gw.GatewayConfigError, match=r"LoRA adapter chat is served by n1/default but not by "
                                                    r"n2/default, all behind model tiny"):
        gw.build_backends(fleet, SETTINGS)


def test_the_runtime_lora_routes_never_pass_the_gateway():
    with open(os.path.join(ROOT, "roles", "gateway", "templates", "haproxy.cfg.j2")) as f:
        text = f.read()
    assert "http-request deny deny_status 404 if { path_beg /v1/load_lora_adapter /v1/unload_lora_adapter }" in text
