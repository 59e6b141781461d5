"""The one port rule (module_utils/ports.py): the range of each kind of port, one message shape."""
import pytest

from ansible_collections.llmops.serving.plugins.module_utils import ports
from ansible_collections.llmops.serving.plugins.module_utils import vllm_gateway_agent, vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance as V


@pytest.mark.parametrize("kind,good,bad", [
    ("instance", [1024, 8000, "8000", 65535], [0, 1, 80, 1023, 65536, "http", None, True, -1]),
    ("master_port", [1024, 29500, 65535], [0, 1023, 65536, "x"]),
    ("agent", [0, 1, 8321, 65535, "0"], [-1, 65536, "x", True, None]),
    ("gateway", [1, 80, 443, 65535], [0, -1, 65536, "x", None]),
])
def test_each_kind_has_its_range(kind, good, bad):
    assert [p for p in good if ports.problem(kind, "v", p)] == []
    assert [p for p in bad if not ports.problem(kind, "v", p)] == []


def test_one_message_shape():
    assert ports.problem("gateway", "gateway_port", 0) == "gateway_port must be a TCP port in 1..65535 (got 0)"
    assert ports.problem("agent", "vllm_gateway_agent_port", 70000) == (
        "vllm_gateway_agent_port must be a TCP port in 1..65535, or 0 for none (got 70000)")
    msg = ports.problem("instance", "vllm_instances[0].port", 80)
    assert msg.startswith("vllm_instances[0].port must be a TCP port in 1024..65535 (got 80): ")
    assert "cannot bind ports below 1024" in msg


def test_every_checker_says_it_with_the_rule():
    """The view (instance port, master_port) and the gateway agent report exactly the rule's message,
    once (no checker filters another's)."""
    base = {"name": "a", "model": "/m", "host": "127.0.0.1"}
    with pytest.raises(V.InstanceViewError) as e:
        V.build_view([dict(base, port=80)], {"device": "cpu"})
    want = ports.problem("instance", "vllm_instances[0].port", 80)
    assert str(e.value).count(want) == 1, str(e.value)
    multi = vllm_multinode.check(0, dict(base, port=8000, nodes=["h1", "h2"], master_port=80),
                                 {"inventory_hostname": "h1"})
    assert ports.problem("master_port", "vllm_instances[0].master_port", 80) in multi
    agent = vllm_gateway_agent.plan([], {"port": 70000, "fronted": True})
    assert agent["problems"] == [ports.problem("agent", "vllm_gateway_agent_port", 70000) + ". Nothing was changed."]
