"""scripts/h200/site_run.py: the issue-35 steps (big, bigseed, bigcold) are opt-in - the
default procedure of docs/h200.md runs exactly the steps it ran before - and run when named."""
import importlib.util
import json
import os
import sys
import time

from conftest import ROOT


def load(tmp_path, monkeypatch):
    monkeypatch.setenv("H200_WORK", str(tmp_path))
    spec = importlib.util.spec_from_file_location("site_run", os.path.join(ROOT, "scripts", "h200", "site_run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ran = []
    for name, _need in mod.STEPS:
        monkeypatch.setattr(mod, "step_" + name, lambda st, n=name: ran.append(n) or {"rc": 0, "recap": {"changed": 0}})
    monkeypatch.setattr(sys, "argv", ["site_run.py", str(time.time() + 100000)])
    return mod, ran


def test_the_default_procedure_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.delenv("H200_STEPS", raising=False)
    mod, ran = load(tmp_path, monkeypatch)
    mod.main()
    assert ran == ["preflight", "wheelhouse", "site1", "serve", "site2", "check", "verify", "change", "rollback",
                   "fault", "fixtures"]


def test_issue35_steps_run_when_named(tmp_path, monkeypatch):
    monkeypatch.setenv("H200_STEPS", "site1,big,bigseed,bigcold")
    mod, ran = load(tmp_path, monkeypatch)
    mod.main()
    assert ran == ["site1", "big", "bigseed", "bigcold"]
    with open(os.path.join(str(tmp_path), "state.json")) as f:
        assert sorted(json.load(f)["done"]) == ["big", "bigcold", "bigseed", "site1"]
    assert mod.BIG["vllm_tiny_model_preset"] == "llama3-8b" and mod.BIG["vllm_compile_cache_share"] is True


def test_swap_is_opt_in_and_its_instances_pass_the_view(tmp_path, monkeypatch):
    """Issue 33 item 4: ``swap`` runs only when named; the two instances it deploys share GPU 0 with
    sleep mode and pass the role's instance view as a CUDA host builds it (VLLM_SERVER_DEV_MODE=1)."""
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance
    monkeypatch.setenv("H200_STEPS", "swap")
    mod, ran = load(tmp_path, monkeypatch)
    mod.main()
    assert ran == ["swap"] and "swap" in mod.OPT_IN
    extra = mod.swap_extra()
    view = vllm_instance.build_view(extra["vllm_instances"], {"device": "cuda", "gpu_count": 1})
    assert [v["name"] for v in view] == ["tiny", "swapb"] and all(v["sleep_mode"] for v in view)
    assert all(v["env"]["VLLM_SERVER_DEV_MODE"] == "1" and v["gpus_used"] == [0] for v in view)
    assert sum(v["gpu_memory_utilization"] for v in view) <= 0.8
    # The woken one is the 8B-shaped model: its cold start is what a wake-up saves.
    assert [v["model"] for v in view] == ["/srv/models/tiny", mod.BIG_MODEL]


def test_a_step_that_fails_keeps_the_figures_it_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("H200_STEPS", "swap")
    mod, ran = load(tmp_path, monkeypatch)

    def failing(st):
        st["results"]["swap"] = {"swapb_cold": {"start_to_active_s": 99.0}}
        raise RuntimeError("later part failed")
    monkeypatch.setattr(mod, "step_swap", failing)
    mod.main()
    with open(os.path.join(str(tmp_path), "state.json")) as f:
        res = json.load(f)["results"]["swap"]
    assert res["swapb_cold"] == {"start_to_active_s": 99.0} and res["rc"] == 99 and "later part failed" in res["error"]
