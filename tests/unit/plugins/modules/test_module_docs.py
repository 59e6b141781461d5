"""DOCUMENTATION/RETURN of the three modules parse, and their options match
the argument_spec (types, defaults, choices, no_log on api_key)."""
import importlib

import pytest
import yaml

MODULES = ("vllm_health", "vllm_kv_cache_info", "vllm_warmup")


class _Captured(Exception):
    pass


def argument_spec(mod):
    seen = {}

    class Fake(object):
        def __init__(self, argument_spec, **kwargs):
            seen.update(argument_spec)
            raise _Captured()
    orig = mod.AnsibleModule
    mod.AnsibleModule = Fake
    try:
        with pytest.raises(_Captured):
            mod.main()
    finally:
        mod.AnsibleModule = orig
    return seen


@pytest.mark.parametrize("name", MODULES)
def test_docs_match_argument_spec(name):
    mod = importlib.import_module("ansible_collections.llmops.serving.plugins.modules.%s" % name)
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == name
    yaml.safe_load(mod.EXAMPLES)
    ret = yaml.safe_load(mod.RETURN)
    assert ret and all("description" in v for v in ret.values())
    spec = argument_spec(mod)
    assert set(doc["options"]) == set(spec)
    for opt, d in doc["options"].items():
        s = spec[opt]
        assert d.get("type", "str") == s.get("type", "str"), opt
        assert d.get("default") == s.get("default"), opt
        assert d.get("choices") == s.get("choices"), opt
    assert spec["api_key"].get("no_log") is True
