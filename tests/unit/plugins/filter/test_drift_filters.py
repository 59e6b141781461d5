# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The drift filters: bad input is an AnsibleFilterError naming the filter,
what it expects and where that input is built; good input reaches the rows."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.drift import FilterModule

F = FilterModule().filters()

# filter -> (a dict missing its required key or None, words the message must contain)
ROW_FILTERS = {
    "vllm_drift_rows": ({"unit_dir": "/x"}, ["'view'", "playbooks/drift.yml", "without 'view'"]),
    "flash_attn_drift_rows": (None, ["a dict", "playbooks/drift.yml"]),
    "gpustack_drift_rows": ({"venv": "/v"}, ["'install_method'", "playbooks/drift.yml"]),
    "gpustack_model_drift_rows": (None, ["llmops.serving.gpustack_model", "roles/gpustack/tasks/drift_models.yml"]),
    "gateway_drift_rows": (None, ["a dict", "roles/gateway/tasks/drift.yml"]),
    "vllm_venv_drift_rows": (None, ["'venv' and 'cmdlines'", "roles/vllm_service/tasks/drift.yml"]),
    "ray_drift_rows": (None, ["a dict", "roles/ray_cluster/tasks/drift.yml"]),
}


@pytest.mark.parametrize("name", sorted(ROW_FILTERS))
def test_row_filters_reject_a_non_dict_naming_the_filter_and_the_source(name):
    missing, words = ROW_FILTERS[name]
    with pytest.raises(AnsibleFilterError) as e:
        F[name](["not", "a", "dict"], "h1")
    msg = str(e.value)
    assert msg.startswith(name + " expects ") and "got a list" in msg
    for w in words:
        if not w.startswith("without"):
            assert w in msg, (w, msg)
    if missing is not None:
        with pytest.raises(AnsibleFilterError) as e:
            F[name](missing, "h1")
        for w in words:
            assert w in str(e.value), (w, str(e.value))


def test_row_filters_pass_good_input_to_the_rules():
    assert F["vllm_drift_rows"]({"view": []}, "h1") == []
    assert F["gpustack_drift_rows"]({"install_method": "pip"}, "h1") == []
    assert F["gpustack_model_drift_rows"]({"results": []}, "h1") == []
    assert F["flash_attn_drift_rows"]({"skipped": True}, "h1") == []
    rows = F["gateway_drift_rows"]({"installed": False}, "gw")
    assert [(r["host"], r["component"]) for r in rows] == [("gw", "gateway_package")]
    assert F["vllm_venv_drift_rows"]({"venv": "/v", "cmdlines": {"results": []}}, "h1") == []
    assert F["ray_drift_rows"]({}, "h1") == []


def test_collect_and_table_reject_the_wrong_type():
    with pytest.raises(AnsibleFilterError, match="drift_collect expects"):
        F["drift_collect"](["vllm"], {})
    with pytest.raises(AnsibleFilterError, match="drift_table expects a list"):
        F["drift_table"]({"host": "h1"})
    assert F["drift_table"]([]).endswith("(no drift)")
