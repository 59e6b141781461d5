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
