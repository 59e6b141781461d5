# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The ports ray_cluster's preflight checks before any change (roles/ray_cluster/vars/main.yml,
rendered by Ansible for a three-node inventory): the head's GCS port from every worker, and
every node's node manager and object manager ports from every other node, each on the node's
own address and port (host vars win over the role defaults)."""
import json
import os
import subprocess

import yaml

from conftest import ROOT, ansible_env, ansible_tool


def test_preflight_checks_gcs_and_every_nodes_raylet_and_object_manager_ports(tmp_path):
    inventory = {"ray": {"hosts": {
        "head": {"ray_node_address": "10.0.0.1"},
        "w1": {"ray_node_address": "10.0.0.2", "ray_node_manager_port": 16390, "ray_object_manager_port": 16391},
        "w2": {"vllm_node_address": "10.0.0.3"}}}}
    play = [{"hosts": "head", "gather_facts": False,
             "vars_files": [os.path.join(ROOT, "roles", "ray_cluster", "defaults", "main.yml"),
                            os.path.join(ROOT, "roles", "ray_cluster", "vars", "main.yml")],
             "vars": {"ray_group": "ray", "ray_head_host": "head"},
             "tasks": [{"ansible.builtin.debug": {"msg": "{{ _ray_gcs_checks + _ray_node_checks }}"}}]}]
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(tmp_path / "inv.yml"), "-c", "local",
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    checks = json.loads(proc.stdout[proc.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["head"]["msg"]
    got = sorted((c["owner"], c["address"], int(c["port"]), tuple(c["peers"])) for c in checks)
    assert got == sorted([
        ("head", "10.0.0.1", 6379, ("w1", "w2")),                                 # GCS, from the workers
        ("head", "10.0.0.1", 6380, ("w1", "w2")), ("head", "10.0.0.1", 6381, ("w1", "w2")),
        ("w1", "10.0.0.2", 16390, ("head", "w2")), ("w1", "10.0.0.2", 16391, ("head", "w2")),
        ("w2", "10.0.0.3", 6380, ("head", "w1")), ("w2", "10.0.0.3", 6381, ("head", "w1"))])
    assert {c["what"] for c in checks} >= {
        "the Ray node manager (raylet), ray_node_manager_port", "the Ray object manager, ray_object_manager_port"}
