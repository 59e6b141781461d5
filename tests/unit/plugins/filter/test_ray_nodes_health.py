# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""ray_nodes_health and ray_recovering decide as ray_cluster's Jinja did before it moved into
Python: tests/fixtures/ray/old-jinja-nodes-health.json holds, per host of a 4-node inventory
(instances spanning 2 and 3 nodes, a node outside the inventory, a failed, an activating and an
inactive part, a host without ray_instance_parts, an earlier vllm_nodes_health entry), the
vllm_nodes_health that instance_nodes.yml's task and the _ray_recovering that vars/main.yml
computed at 74ec1b9, rendered once by ansible-playbook 2.19 with real hostvars."""
import json
import os

import pytest

from conftest import FIXTURES
from ansible_collections.llmops.serving.plugins.filter.ray_cluster import FilterModule

F = FilterModule().filters()
with open(os.path.join(FIXTURES, "ray", "old-jinja-nodes-health.json")) as fh:
    OLD = json.load(fh)
INV = OLD["inventory"]


@pytest.mark.parametrize("host", sorted(INV))
def test_nodes_health_is_the_old_jinja_one(host):
    spanning = INV[host]["_ray_spanning"]
    want = OLD["out"][host]["vllm_nodes_health"]
    if not any(i["node_rank"] == 0 for i in spanning):
        assert want == "UNDEFINED"  # the task is skipped: nothing published
        return
    got = dict(INV[host].get("vllm_nodes_health", {}), **F["ray_nodes_health"](spanning, INV))
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


@pytest.mark.parametrize("host", sorted(INV))
def test_recovering_is_the_old_jinja_one(host):
    hostvars = dict((h, dict(v, vllm_nodes_health=OLD["out"][h]["vllm_nodes_health"]))
                    if OLD["out"][h]["vllm_nodes_health"] != "UNDEFINED" else (h, v) for h, v in INV.items())
    got = F["ray_recovering"](INV[host]["_ray_spanning"], hostvars)
    assert json.dumps(got, sort_keys=True) == json.dumps(OLD["out"][host]["_ray_recovering"], sort_keys=True)
