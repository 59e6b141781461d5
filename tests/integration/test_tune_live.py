# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""playbooks/tune.yml against a REAL vLLM (CPU build), connection local.

The service role is swapped (tune_service_role) for tests/integration/roles/local_vllm,
a stand-in with vllm_service's contract (vllm_common_args in, restart on change,
readiness gate) that runs vLLM as a plain process: no systemd needed. The molecule
scenario molecule/vllm_service (load phase) runs the same sweep with the real llmops.serving.vllm_service.
Needs VLLM_TEST_PYTHON (see test_verify_live.py). Runtime: about 4 min on 2 cores.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VLLM_PYTHON = os.environ.get("VLLM_TEST_PYTHON", "")
MODEL = os.environ.get("VLLM_TEST_MODEL", "/srv/models/tiny")
BIN = os.path.dirname(sys.executable)
KEY = "tune-live-test-key"

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON or not os.path.exists(VLLM_PYTHON) or not os.path.isdir(MODEL),
    reason="set VLLM_TEST_PYTHON to a vLLM venv's python (e.g. /opt/vllm-dev/bin/python) and have %s" % MODEL)


def test_sweep_two_values_restores_configured(tmp_path):
    port = free_port()
    srv = tmp_path / "srv"
    srv.mkdir()
    vars_ = dict(
        tune_hosts="all", tune_service_role="local_vllm", tune_option="max_num_seqs", tune_values=[2, 8],
        tune_objective="output_throughput", tune_report_dir=str(tmp_path / "reports"),
        vllm_common_args={"max_num_seqs": 16},
        local_vllm_python=VLLM_PYTHON, local_vllm_model=MODEL, local_vllm_port=port, local_vllm_dir=str(srv),
        local_vllm_api_key=KEY,
        verify_tool="vllm_bench", verify_base_url="http://127.0.0.1:%d" % port, verify_model="tiny",
        verify_api_key=KEY, verify_tokenizer_path=MODEL,
        verify_vllm_venv=os.path.dirname(os.path.dirname(VLLM_PYTHON)), verify_work_dir=str(tmp_path / "work"),
        verify_concurrency=[1, 4], verify_num_requests=[4, 16], verify_plot_python=sys.executable)
    (tmp_path / "vars.json").write_text(json.dumps(vars_))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=os.path.join(ROOT, "tests", "integration", "roles"),
               PATH=BIN + os.pathsep + os.environ["PATH"])
    start = time.time()
    try:
        p = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                            "-e", "ansible_python_interpreter=" + sys.executable, "-e", "@" + str(tmp_path / "vars.json"),
                            os.path.join(ROOT, "playbooks", "tune.yml")],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        print("tune.yml: rc=%d in %.1f s" % (p.returncode, time.time() - start))
        assert p.returncode == 0, p.stdout[-5000:]
        runs = list((tmp_path / "reports").iterdir())
        assert len(runs) == 1
        report = runs[0] / "localhost"
        sweep = json.loads((report / "sweep.json").read_text())
        assert [e["value"] for e in sweep["sweep"]] == [2, 8]
        assert all(e["ok"] and len(e["levels"]) == 2 for e in sweep["sweep"])
        assert sweep["best"]["value"] in (2, 8) and sweep["best"]["concurrency"] == 4
        md = (report / "sweep.md").read_text()
        assert "- **best value**: %s" % sweep["best"]["value"] in md
        assert "- **service left on**: max_num_seqs=16" in md
        assert (report / "sweep.png").read_bytes()[:4] == b"\x89PNG"
        for v in (2, 8):
            assert (report / ("max_num_seqs=%d" % v) / "summary.md").exists()
        # the service runs the configured value again
        argv = json.loads((srv / "state.json").read_text())["argv"]
        assert argv[argv.index("--max-num-seqs") + 1] == "16"
        assert KEY not in p.stdout
    finally:
        if (srv / "pid").exists():
            try:
                os.killpg(int((srv / "pid").read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass
