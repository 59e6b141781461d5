"""Filters leftover_components and leftover_drift_rows (plugins/filter/removal.py): a wrong input
is an error naming where the input comes from; a registered leftovers result gives rows."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.removal import FilterModule

F = FilterModule().filters()


def test_wrong_inputs_name_their_source():
    with pytest.raises(AnsibleFilterError, match="registered result of llmops.serving.leftovers"):
        F["leftover_drift_rows"]({"changed": True}, "gw2", "gateway", ["gateway"])
    with pytest.raises(AnsibleFilterError, match=r"\{component: \[groups\]\}"):
        F["leftover_components"](["gateway"], "gw2", {})


def test_a_registered_result_gives_rows():
    result = {"changed": True, "leftovers": {"ours": True, "paths": ["/etc/haproxy/llmops"], "units": [
        {"name": "haproxy.service", "actions": ["stop"], "found": "active (running), disabled with llmops config"}]}}
    rows = F["leftover_drift_rows"](result, "gw2", "gateway", ["gateway"])
    assert [(r["host"], r["component"], r["path"]) for r in rows] == [
        ("gw2", "gateway_leftover", "haproxy.service"), ("gw2", "gateway_leftover", "/etc/haproxy/llmops")]
    assert F["leftover_components"]({"gateway": ["gateway"]}, "gw2", {"gateway": ["gw1"]}) == ["gateway"]
