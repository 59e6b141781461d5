# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""flash_attn_decision decides as roles/flash_attn/tasks/preflight.yml's Jinja did before it moved
into Python: tests/fixtures/flash_attn/old-jinja-decision.json holds the old task's facts
(_flash_attn_derived, _flash_attn_skip, _flash_attn_skip_reason, _flash_attn_archs, at 74ec1b9),
rendered once by ansible-playbook 2.19 for each case's variables (disabled, the capability
override, llmops_gpu of a cpu host / an 8x H200 host / mixed GPUs, nvidia-smi's lines, failed
or skipped, the archs override)."""
import json
import os

import pytest

from conftest import FIXTURES
from ansible_collections.llmops.serving.plugins.filter.flash_attn import FilterModule

decide = FilterModule().filters()["flash_attn_decision"]

with open(os.path.join(FIXTURES, "flash_attn", "old-jinja-decision.json")) as fh:
    OLD = json.load(fh)


@pytest.mark.parametrize("case", sorted(OLD))
def test_decision_is_the_old_jinja_decision(case):
    v = OLD[case]["vars"]
    got = decide({"enabled": v["flash_attn_enabled"], "compute_capabilities": v["flash_attn_compute_capabilities"],
                  "llmops_gpu": v.get("llmops_gpu"), "nvidia_smi": v.get("_flash_attn_nvsmi", {}),
                  "archs_override": v["_flash_attn_archs_override"]})
    want = OLD[case]["facts"]
    assert json.dumps({k: got[k] for k in want}, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_the_cases_cover_every_skip_reason():
    reasons = set(c["facts"]["skip_reason"].split(" (")[0] for c in OLD.values())
    assert {"", "flash_attn_enabled is false", "no NVIDIA GPU found", "every GPU has compute capability < 8.0"} <= reasons
