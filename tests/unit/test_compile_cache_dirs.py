"""The unit points Triton at a persistent directory of the instance that the fleet compile
cache collects and seeds (compile_cache.DEFAULT_DIRS). Seen on the H200 (docs/benchmarks.md,
2026-12-03): without it a cold start's Triton kernels - Inductor's and vLLM's sampler kernels
JIT-compiled in its warmup - land in /tmp/torchinductor_<user> (torch's triton_cache_dir when
TRITON_CACHE_DIR is unset), which PrivateTmp drops at every stop: a seeded start compiled them
again (py-spy: triton make_ptx/make_cubin and launcher builds under warmup_kernels, 15 s)."""
import os
import re

from ansible_collections.llmops.serving.plugins.module_utils import compile_cache as cc

from conftest import ROOT

UNIT = os.path.join(ROOT, "roles", "vllm_service", "templates", "vllm@.service.j2")


def env_lines():
    with open(UNIT) as f:
        return dict(re.findall(r"^Environment=(\w+)=(.*)$", f.read(), re.M))


def test_triton_cache_is_in_the_state_dir_and_collected():
    env = env_lines()
    home = env["HOME"]
    assert home == "{{ vllm_home }}/%i"
    triton = env.get("TRITON_CACHE_DIR")
    assert triton and triton.startswith(home + "/"), env
    rel = triton[len(home) + 1:]
    assert rel in cc.DEFAULT_DIRS, (rel, cc.DEFAULT_DIRS)
    # Not under the unit's private /tmp, not under a path a wipe of VLLM_CACHE_ROOT alone misses.
    assert not triton.startswith("/tmp")


def test_the_role_and_the_module_collect_what_the_rule_says():
    """One list of dirs: compile_cache.DEFAULT_DIRS; the role's default and its argument_specs, and the
    module's documented default, say the same."""
    import yaml
    from ansible_collections.llmops.serving.plugins.modules import vllm_compile_cache as mod
    with open(os.path.join(ROOT, "roles", "vllm_service", "defaults", "main.yml")) as f:
        assert yaml.safe_load(f)["vllm_compile_cache_dirs"] == cc.DEFAULT_DIRS
    with open(os.path.join(ROOT, "roles", "vllm_service", "meta", "argument_specs.yml")) as f:
        spec = yaml.safe_load(f)["argument_specs"]["main"]["options"]["vllm_compile_cache_dirs"]
    assert spec["default"] == cc.DEFAULT_DIRS
    assert yaml.safe_load(mod.DOCUMENTATION)["options"]["dirs"]["default"] == cc.DEFAULT_DIRS


def test_modelinfos_is_a_companion_under_the_units_vllm_cache_root():
    """vLLM writes its model-class inspection to $VLLM_CACHE_ROOT/modelinfos: the companion dir is that one
    (relative to the unit's HOME), never one of the compile dirs, and the module documents the same default."""
    import yaml
    from ansible_collections.llmops.serving.plugins.modules import vllm_compile_cache as mod
    env = env_lines()
    root = env["VLLM_CACHE_ROOT"][len(env["HOME"]) + 1:]
    assert cc.COMPANION_DIRS == [root + "/modelinfos"]
    assert not set(cc.COMPANION_DIRS) & set(cc.DEFAULT_DIRS)
    assert yaml.safe_load(mod.DOCUMENTATION)["options"]["companion_dirs"]["default"] == cc.COMPANION_DIRS
