# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""flash_attn_info against a real child interpreter (a fresh venv) holding the
FAKE torch/flash-attn stand-ins from tests/fixtures/flash_attn/make_fake_flash_attn.py,
and a replay of a cuobjdump --list-elf output (made fixture, see README)."""
import json
import os
import subprocess
import sys
import venv

import pytest
from module_args import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import flash_attn_info

FIX = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "flash_attn"))
sys.path.insert(0, FIX)
import make_fake_flash_attn as fake  # noqa: E402


def _run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            flash_attn_info.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def fake_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(str(root))
    py = os.path.join(str(root), "bin", "python")
    site = subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    fake.make_torch(site)
    return py, site


def test_no_venv_is_reported_as_data(capsys, tmp_path):
    r = _run(capsys, python=str(tmp_path / "nope" / "python"), archs=["90"])
    assert r["changed"] is False and r["available"] is False and "not found" in r["msg"]


def test_bad_arch_fails_with_fix(capsys, fake_venv):
    r = _run(capsys, python=fake_venv[0], archs=["sm_90"])
    assert r["failed"] and "write 90" in r["msg"]


def test_facts_key_and_cubins(capsys, fake_venv, tmp_path):
    py, site = fake_venv
    r = _run(capsys, python=py, archs=["90"], flash_attn_version="2.8.3.post2")
    assert r["available"] and r["torch_version"] == "2.11.0+cu130" and r["torch_cuda"] == "13.0"
    assert r["cxx11_abi"] is True and r["python_tag"] == "cp%d%d" % sys.version_info[:2]
    assert r["key"]["string"] == "flash-attn-2.8.3.post2_torch-2.11.0+cu130_cuda-13.0_%s_sm90_cxx11abi-1" % r["python_tag"]
    assert r["flash_attn_version"] is None and r["extension"] is None and r["missing_archs"] == ["90"]

    # An extension module and a cuobjdump that replays the sm_90 listing.
    with open(os.path.join(site, "flash_attn_2_cuda.py"), "w") as f:
        f.write("# FAKE stand-in for the compiled extension\n")
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\n[ \"$1\" = --list-elf ] || exit 2\ncat %s/cuobjdump-list-elf-sm90.txt\n" % FIX)
    tool.chmod(0o755)
    state = tmp_path / "installed.json"
    state.write_text(json.dumps({"key": r["key"]["id"]}))
    r2 = _run(capsys, python=py, archs=["80", "90"], cuobjdump=str(tool), state_file=str(state),
              flash_attn_version="2.8.3.post2")
    assert r2["cubins_checked"] and r2["cubins"] == {"90": 72}
    assert r2["missing_archs"] == ["80"]
    assert r2["installed_key"] == r["key"]["id"]
    os.remove(os.path.join(site, "flash_attn_2_cuda.py"))


def test_numeric_check_reports_error_without_gpu(capsys, fake_venv):
    r = _run(capsys, python=fake_venv[0], numeric_check=True)
    assert r["numeric"]["ran"] is False and r["max_rel_error"] is None
