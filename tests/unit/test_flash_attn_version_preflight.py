# -*- coding: utf-8 -*-
"""The flash_attn role's preflight on localhost (ansible-playbook, tasks_from preflight) against a
local simple index that serves the REAL PyPI page of flash-attn captured 2026-12-03
(tests/fixtures/flash_attn/pypi-simple-flash-attn-2026-12-03.html): issue 31's "2.7.0" fails
before anything changes; the pinned default passes; a wheel of the version in the controller cache
needs no index."""
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from ansible_cli import ansible_env, ansible_tool
from collection_path import ROOT
from conftest import FIXTURES


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    (root / "simple" / "flash-attn").mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, "flash_attn", "pypi-simple-flash-attn-2026-12-03.html"),
                str(root / "simple" / "flash-attn" / "index.html"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/simple" % srv.server_address[1]
    srv.shutdown()


def preflight(tmp_path, **extra):
    play = tmp_path / "p.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role:\n        name: llmops.serving.flash_attn\n"
                    "        tasks_from: preflight\n")
    evars = dict({"flash_attn_compute_capabilities": ["9.0"], "flash_attn_controller_cache": str(tmp_path / "cache"),
                  "ansible_python_interpreter": sys.executable}, **extra)
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    cp = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                         "-e", json.dumps(evars)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                        check=False)
    out = json.loads(cp.stdout)
    results = [t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]]
    return cp.returncode, results, out["stats"]["localhost"]


def test_a_version_the_index_does_not_have_fails_in_preflight(tmp_path, index):
    rc, results, stats = preflight(tmp_path, flash_attn_version="2.7.0", flash_attn_pip_index_url=index)
    assert rc == 2 and stats["changed"] == 0
    msg = [r for r in results if r.get("failed")][0]["msg"]
    assert msg.startswith("flash_attn on localhost: flash_attn_version=2.7.0: the index %s/flash-attn/ has no "
                          "flash-attn 2.7.0" % index)
    assert "2.7.0.post2" in msg and msg.endswith("Nothing was changed.")


def test_the_pinned_version_passes_and_a_cached_wheel_needs_no_index(tmp_path, index):
    rc, results, stats = preflight(tmp_path, flash_attn_pip_index_url=index)
    assert rc == 0 and stats["changed"] == 0
    wheel = tmp_path / "cache" / "0123abcd" / "flash_attn-2.7.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    # A wheel of that version built before: the index (here one that does not answer) is not asked.
    rc, results, stats = preflight(tmp_path, flash_attn_version="2.7.0",
                                   flash_attn_pip_index_url="http://127.0.0.1:9/simple")
    assert rc == 0, results
