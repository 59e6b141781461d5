"""roles/wheelhouse build with a locked set (wheelhouse_no_deps), run by Ansible with real pip.

Offline: the wheels are made here (llmops-probe-a requires llmops-probe-b) and found
through find-links; the index is an empty local simple index (file://), so pip asks no
network. Resolving, the wheelhouse holds both; locked, exactly the pin.
"""
import json
import os
import subprocess
import sys
import zipfile

import yaml

from conftest import ansible_env, ansible_tool


def wheel(dirname, name, requires=()):
    dist = name.replace("-", "_")
    path = os.path.join(dirname, "%s-1.0-py3-none-any.whl" % dist)
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name + "".join(
        "Requires-Dist: %s\n" % r for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("%s/__init__.py" % dist, "")
        z.writestr("%s-1.0.dist-info/METADATA" % dist, meta)
        z.writestr("%s-1.0.dist-info/WHEEL" % dist, "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                    "Tag: py3-none-any\n")
        z.writestr("%s-1.0.dist-info/RECORD" % dist, "")


def build(tmp_path, no_deps):
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    wheel(str(links), "llmops-probe-a", ["llmops-probe-b"])
    wheel(str(links), "llmops-probe-b")
    index = tmp_path / "simple"
    index.mkdir(exist_ok=True)
    cache = tmp_path / ("cache-%s" % no_deps)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{"ansible.builtin.include_role": {
        "name": "llmops.serving.wheelhouse", "tasks_from": "build"}}],
        "vars": {"wheelhouse_requirements": ["llmops-probe-a==1.0"], "wheelhouse_no_deps": no_deps,
                 "wheelhouse_python_version": "%d.%d" % sys.version_info[:2], "wheelhouse_platforms": ["any"],
                 "wheelhouse_find_links": [str(links)], "wheelhouse_index_url": "file://%s" % index,
                 "wheelhouse_controller_dir": str(cache), "wheelhouse_pip_python": sys.executable}}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=dict(ansible_env(), ANSIBLE_PYTHON_INTERPRETER=sys.executable),
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    wh = cache / ("llmops-probe-a-1.0-cp%d%d-x86_64" % sys.version_info[:2])
    return sorted(os.listdir(str(wh))), json.loads((wh / "requirements.json").read_text())


def test_a_locked_set_holds_exactly_the_pins(tmp_path):
    files, request = build(tmp_path, no_deps=True)
    assert [f for f in files if f.endswith(".whl")] == ["llmops_probe_a-1.0-py3-none-any.whl"]
    assert request["no_deps"] is True


def test_a_resolved_set_brings_the_dependencies_and_keeps_the_old_request_shape(tmp_path):
    files, request = build(tmp_path, no_deps=False)
    assert [f for f in files if f.endswith(".whl")] == ["llmops_probe_a-1.0-py3-none-any.whl",
                                                        "llmops_probe_b-1.0-py3-none-any.whl"]
    # Wheelhouses built before the option stay current: the default adds no key.
    assert "no_deps" not in request
