"""Every filter has its own documentation (plugins/filter/<name>.yml) that
`ansible-doc -t filter llmops.serving.NAME` renders as its own, and docs/
(modules and filters) is what scripts/gen-plugin-docs.py makes from them."""
import glob
import importlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, ansible_env, ansible_tool


def filter_names():
    names = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))):
        mod = importlib.import_module("ansible_collections.llmops.serving.plugins.filter."
                                      + os.path.basename(path)[:-3])
        for name in mod.FilterModule().filters():
            names[name] = os.path.basename(path)
    return names


def test_every_filter_has_a_docs_file():
    missing, wrong = [], []
    for name in filter_names():
        path = os.path.join(ROOT, "plugins", "filter", name + ".yml")
        if not os.path.exists(path):
            missing.append(name)
            continue
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
        if (doc.get("DOCUMENTATION") or {}).get("name") != name or not doc.get("RETURN") or not doc.get("EXAMPLES"):
            wrong.append(name)
    assert not missing, "filters without plugins/filter/NAME.yml: %s" % missing
    assert not wrong, "NAME.yml without DOCUMENTATION.name == NAME, EXAMPLES and RETURN: %s" % wrong


def test_ansible_doc_renders_each_filter_as_its_own():
    names = sorted(filter_names())
    out = subprocess.run([ansible_tool("ansible-doc"), "-t", "filter", "--json"]
                         + ["llmops.serving." + n for n in names],
                         cwd=ROOT, env=ansible_env(), capture_output=True, text=True, check=True).stdout
    docs = json.loads(out)
    bad = [n for n in names if ((docs.get("llmops.serving." + n) or {}).get("doc") or {}).get("name") != n
           or not docs["llmops.serving." + n]["doc"].get("short_description")]
    assert not bad, "ansible-doc shows no or another filter's documentation for: %s" % bad


def _pinned_core():
    with open(os.path.join(ROOT, "tests", "requirements.txt"), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("ansible-core=="):
                return line.split("==", 1)[1].strip()
    return None


def test_generated_plugin_docs_are_current():
    # docs/modules/ embed ansible-core's own doc fragments (the file options of
    # model_pull, ...), whose text changes between cores: the pages are what the
    # pinned core renders; the other cores of the matrix check the rest.
    from ansible.release import __version__ as core
    if core != _pinned_core():
        pytest.skip("docs/ are rendered with the pinned ansible-core %s (this is %s)" % (_pinned_core(), core))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-plugin-docs.py"), "--check"],
                          cwd=ROOT, env=ansible_env(), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
