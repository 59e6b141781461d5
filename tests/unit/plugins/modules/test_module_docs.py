"""DOCUMENTATION/RETURN of the vllm_* and gpustack_* modules parse, and their
options (with those of their doc fragments) match the argument_spec (types,
defaults, choices, no_log on the secrets)."""
import importlib

import pytest
import yaml

from conftest import module_argument_spec

MODULES = ("vllm_health", "vllm_kv_cache_info", "vllm_warmup",
           "gpustack_api_key", "gpustack_cluster", "gpustack_model", "gpustack_model_info")
SECRETS = ("api_key", "password", "key")


def argument_spec(mod):
    return module_argument_spec(mod)


def options(doc):
    """The module's options merged over those of its doc fragments, as
    ansible-doc does (an option the module documents itself wins)."""
    merged = {}
    for slug in doc.get("extends_documentation_fragment") or []:
        namespace, collection, name = slug.split(".")[:3]
        attr = slug.split(".")[3].upper() if slug.count(".") == 3 else "DOCUMENTATION"
        fragment = importlib.import_module("ansible_collections.%s.%s.plugins.doc_fragments.%s"
                                           % (namespace, collection, name)).ModuleDocFragment
        merged.update(yaml.safe_load(getattr(fragment, attr))["options"])
    merged.update(doc.get("options") or {})
    return merged


@pytest.mark.parametrize("name", MODULES)
def test_docs_match_argument_spec(name):
    mod = importlib.import_module("ansible_collections.llmops.serving.plugins.modules.%s" % name)
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == name
    yaml.safe_load(mod.EXAMPLES)
    ret = yaml.safe_load(mod.RETURN)
    assert ret and all("description" in v for v in ret.values())
    spec = argument_spec(mod)
    opts = options(doc)
    assert set(opts) == set(spec)
    for opt, d in opts.items():
        s = spec[opt]
        assert d.get("type", "str") == s.get("type", "str"), opt
        assert d.get("default") == s.get("default"), opt
        assert d.get("choices") == s.get("choices"), opt
        assert bool(d.get("required")) == bool(s.get("required")), opt
    assert "api_key" in spec or "password" in spec
    for opt in SECRETS:
        if opt in spec:
            assert spec[opt].get("no_log") is True, opt
