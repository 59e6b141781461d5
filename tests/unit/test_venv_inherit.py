"""roles/vllm_install/files/venv-inherit.py, run for real: a venv over another venv's packages.

The H200 image holds CUDA torch in a venv (/opt/torch/.venv); Python's own
--system-site-packages would expose the base installation instead. Here the
tools venv (a venv too, holding ansible-core and pip) plays that image venv.
"""
import json
import os
import subprocess
import sys
import zipfile

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "roles", "vllm_install", "files", "venv-inherit.py")


def run(python, dest):
    p = subprocess.run([python, SCRIPT, str(dest)], capture_output=True, text=True, timeout=120, check=False)
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])


def test_the_venv_sees_a_venv_interpreters_packages_and_installs_with_its_pip(tmp_path):
    dest = tmp_path / "vllm-0.25.1-inherit-abcd1234"
    rc, out = run(sys.executable, dest)
    assert rc == 0 and out["changed"] is True
    py = str(dest / "bin" / "python")
    # A package of the inherited venv (not of the base installation) imports from the new venv.
    probe = subprocess.run([py, "-c", "import yamllint, sys; print(yamllint.__file__); print(sys.prefix)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert probe[0].startswith(sys.prefix) and probe[1] == str(dest)
    # Python's own --system-site-packages, from the same interpreter, does not see it.
    plain = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(plain)], check=True)
    assert subprocess.run([str(plain / "bin" / "python"), "-c", "import yamllint"], capture_output=True,
                          check=False).returncode != 0
    # bin/pip is the inherited pip, and it installs a wheel into the new venv (--no-index --no-deps).
    whl = tmp_path / "llmops_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(str(whl), "w") as z:
        z.writestr("llmops_probe/__init__.py", "X = 1\n")
        z.writestr("llmops_probe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: llmops-probe\nVersion: 1.0\n")
        z.writestr("llmops_probe-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("llmops_probe-1.0.dist-info/RECORD", "")
    pip = str(dest / "bin" / "pip")
    subprocess.run([pip, "install", "-q", "--no-index", "--no-deps", str(whl)], check=True, capture_output=True)
    where = subprocess.run([py, "-c", "import llmops_probe; print(llmops_probe.__file__)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert where.startswith(str(dest))
    assert not os.path.exists(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages",
                                           "llmops_probe"))
    # A second run changes nothing.
    rc, out = run(sys.executable, dest)
    assert rc == 0 and out["changed"] is False


def test_an_environment_without_pip_is_named_with_the_fix(tmp_path):
    base = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    rc, out = run(str(base / "bin" / "python"), tmp_path / "v")
    assert rc == 1 and out["failed"] is True
    assert "hold no pip" in out["msg"] and "vllm_venv_inherit_packages: false" in out["msg"]
