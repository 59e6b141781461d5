# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""optional_hosts: the plays of optional groups match no unknown name (no host-pattern warning)."""
import os
import subprocess

import pytest

from ansible_collections.llmops.serving.plugins.filter.inventory import optional_hosts

from conftest import ROOT, ansible_env, ansible_tool

GROUPS = {"all": ["n1", "n2", "gw"], "ungrouped": [], "vllm": ["n1", "n2"], "gateway": ["gw"], "monitoring": []}


@pytest.mark.parametrize("pattern, expected", [
    ("ray", []),
    ("gateway", "gateway"),
    ("monitoring", "monitoring"),  # an empty group exists: no warning, kept
    ("gpustack_server[0]", []),
    ("vllm:gpustack_server:gpustack_worker:gateway:monitoring", "vllm:gateway:monitoring"),
    ("vllm,ray", "vllm"),
    ("vllm:!ray", "vllm"),
    ("vllm:&ray", []),
    ("vllm:&gateway", "vllm:&gateway"),
    ("!vllm", []),
    ("n1:nope", "n1"),
    ("vllm[0]", "vllm[0]"),
    ("node*", "node*"),
    (["vllm", "ray"], "vllm"),
])
def test_unknown_names_are_left_out(pattern, expected):
    assert optional_hosts(pattern, GROUPS) == expected


def test_required_terms_are_kept_first_as_they_are():
    assert optional_hosts(["gpustack_worker", "ray"], GROUPS, required=["vllm", "typo"]) == "vllm:typo"
    assert optional_hosts(["gateway"], GROUPS, required="vllm") == "vllm:gateway"


def test_site_yml_on_the_demo_inventory_prints_no_host_pattern_warning():
    """The demo's inventory has only a vllm group: site.yml's optional plays must not warn (they did, five times)."""
    for playbook in ("site.yml", "playbooks/drift.yml"):
        p = subprocess.run([ansible_tool("ansible-playbook"), "-i", os.path.join(ROOT, "inventories", "local"),
                            os.path.join(ROOT, playbook), "--list-hosts"],
                           cwd=ROOT, env=ansible_env(), capture_output=True, text=True, check=False)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "Could not match supplied host pattern" not in p.stdout + p.stderr, (playbook, p.stderr)
        assert "llmops-demo" in p.stdout
