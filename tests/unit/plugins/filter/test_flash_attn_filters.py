# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.flash_attn import FilterModule

F = FilterModule().filters()


def test_filters_raise_ansible_errors_with_the_fix():
    with pytest.raises(AnsibleFilterError) as e:
        F["flash_attn_validate_archs"](["sm_90"])
    assert "write 90" in str(e.value)


def test_build_plan_from_hostvars_in_play_order():
    hostvars = {
        "g1": {"_flash_attn_key_id": "kA", "_flash_attn_cache_hit": False},
        "g2": {"_flash_attn_key_id": "kA", "_flash_attn_cache_hit": False},
        "a1": {"_flash_attn_key_id": "kB", "_flash_attn_cache_hit": True},
        "cpu": {},
    }
    plan = F["flash_attn_build_plan"](["g2", "g1", "a1", "cpu"], hostvars)
    assert plan["builders"] == {"kA": "g2"}
    assert plan["hosts"] == {"g2": "build", "g1": "install", "a1": "install", "cpu": "skip"}


def test_needs_install_from_info():
    info = {"flash_attn_version": "2.8.3.post2", "installed_key": "k"}
    assert F["flash_attn_needs_install"](info, "2.8.3.post2", "k") is False
    assert F["flash_attn_needs_install"](info, "2.8.3.post2", "k2") is True
