# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The verify role against a REAL vLLM (CPU build) server, connection local.

Needs: VLLM_TEST_PYTHON=<vLLM venv>/bin/python (e.g. /opt/vllm-dev/bin/python),
a tiny model (VLLM_TEST_MODEL, default /srv/models/tiny; generated when absent with the
generator test_vllm_live.py uses), and for EvalScope network access to PyPI on the
first run: the venv is installed by the role into EVALSCOPE_VENV (default
~/.cache/llmops/evalscope-venv) and reused afterwards (~2 min, 1.1 GB once).
Skips cleanly when the vLLM venv is absent. Runtime: about 6-7 min on 2 cores.

    VLLM_TEST_PYTHON=/opt/vllm-dev/bin/python pytest -v tests/integration/test_verify_live.py
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from bare_vllm import warm_up  # noqa: E402  pylint: disable=wrong-import-position
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "verify_live.yml")
VLLM_PYTHON = os.environ.get("VLLM_TEST_PYTHON", "")
MODEL = os.environ.get("VLLM_TEST_MODEL", "/srv/models/tiny")
EVALSCOPE_VENV = os.environ.get("EVALSCOPE_VENV", os.path.expanduser("~/.cache/llmops/evalscope-venv"))
API_KEY = "verify-live-test-key"
BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON or not os.path.exists(VLLM_PYTHON),
    reason="set VLLM_TEST_PYTHON to a vLLM venv's python (e.g. /opt/vllm-dev/bin/python)")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """VLLM_TEST_MODEL when it exists, else generated (a fresh CI machine has none)."""
    if os.path.exists(os.path.join(MODEL, "config.json")):
        return MODEL
    from test_vllm_live import generate_model  # same generator and sizes as the live module tests
    return generate_model(tmp_path_factory.mktemp("model") / "tiny", 4)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    port = free_port()
    d = tmp_path_factory.mktemp("vllm")
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CACHE_ROOT=str(d / "cache"), VLLM_API_KEY=API_KEY)
    log = open(str(d / "server.log"), "w")
    proc = subprocess.Popen(
        [VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", tiny_model, "--served-model-name", "tiny",
         "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512", "--enforce-eager",
         "--distributed-executor-backend", "uni"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 300
    while True:
        try:
            if urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2).status == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("vLLM did not start, see %s" % (d / "server.log"))
        time.sleep(2)
    warm_up(VLLM_PYTHON, "http://127.0.0.1:%d" % port, api_key=API_KEY)
    yield "http://127.0.0.1:%d" % port
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def run_role(tmp_path, base_url, model, **overrides):
    vars_ = dict(
        verify_base_url=base_url, verify_model="tiny", verify_api_key=API_KEY, verify_tokenizer_path=model,
        verify_vllm_venv=os.path.dirname(os.path.dirname(VLLM_PYTHON)), verify_evalscope_venv=EVALSCOPE_VENV,
        verify_work_dir=str(tmp_path / "work"), verify_report_dir=str(tmp_path / "reports"),
        verify_run_id="run", verify_concurrency=[1, 4], verify_num_requests=[8, 16],
        verify_plot_python=sys.executable)
    vars_.update(overrides)
    (tmp_path / "vars.json").write_text(json.dumps(vars_))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PATH=BIN + os.pathsep + os.environ["PATH"],
               ANSIBLE_NOCOLOR="1")
    start = time.time()
    p = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                        "-e", "ansible_python_interpreter=" + sys.executable, "-e", "@" + str(tmp_path / "vars.json"),
                        PLAYBOOK], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    elapsed = time.time() - start
    print("ansible-playbook %s: rc=%d in %.1f s" % (overrides.get("verify_tool", "evalscope"), p.returncode, elapsed))
    return p.returncode, p.stdout, elapsed, tmp_path / "reports" / "run" / "localhost"


def _check_report(report, tool):
    files = sorted(str(f.relative_to(report)) for f in report.rglob("*") if f.is_file())
    assert "summary.md" in files and "results.json" in files and "plot.png" in files, files
    assert (report / "plot.png").read_bytes()[:4] == b"\x89PNG"
    results = json.loads((report / "results.json").read_text())
    assert [lv["concurrency"] for lv in results["levels"]] == [1, 4]
    for lv in results["levels"]:
        assert lv["tool"] == tool and lv["failed"] == 0 and lv["completed"] == lv["requests"]
        assert lv["output_throughput"] > 0 and lv["ttft_p99_ms"] > 0
    assert any(f.startswith("raw/") and f.endswith(".json") for f in files)
    for f in report.rglob("*"):
        if f.is_file():
            assert API_KEY.encode() not in f.read_bytes(), "API key leaked into %s" % f
    return files, results


def test_vllm_bench_parsed_report(server, tiny_model, tmp_path):
    rc, out, _t, report = run_role(tmp_path, server, tiny_model, verify_tool="vllm_bench", verify_slo_p99_ttft_ms=60000)
    assert rc == 0, out[-4000:]
    files, _r = _check_report(report, "vllm_bench")
    assert "raw/concurrency_1.json" in files and "raw/concurrency_4.json" in files
    assert API_KEY not in out


def test_evalscope_parsed_report_with_html(server, tiny_model, tmp_path):
    rc, out, _t, report = run_role(tmp_path, server, tiny_model, verify_tool="evalscope", verify_slo_min_output_tok_s=0.1)
    assert rc == 0, out[-4000:]
    files, _r = _check_report(report, "evalscope")
    assert any(f.endswith("perf_report.html") for f in files), files
    assert any(f.endswith("parallel_4_number_16/benchmark_summary.json") for f in files), files
    assert API_KEY not in out


def test_anthropic_messages_load_parsed_report(server, tiny_model, tmp_path):
    """verify_api=anthropic: vllm bench with the wrapper's request function (the Anthropic SDK), /v1/messages,
    against a vLLM that has its own key (the SDK sends it as Authorization: Bearer): same report and SLO checks."""
    rc, out, _t, report = run_role(tmp_path, server, tiny_model, verify_tool="vllm_bench", verify_api="anthropic",
                                   verify_slo_p99_ttft_ms=60000)
    assert rc == 0, out[-4000:]
    files, _r = _check_report(report, "vllm_bench")
    raw = json.loads((report / "raw" / "concurrency_4.json").read_text())
    assert raw["backend"] == "anthropic-messages" and raw["completed"] == 16, raw
    summary = (report / "summary.md").read_text()
    assert "%s/v1/messages (model tiny, anthropic API)" % server in summary and "## SLO: PASS" in summary
    assert "--backend anthropic-messages" in (report / "loadgen.log").read_text()
    assert API_KEY not in out


def test_impossible_slo_fails_with_table(server, tiny_model, tmp_path):
    rc, out, _t, report = run_role(tmp_path, server, tiny_model, verify_tool="vllm_bench", verify_concurrency=[2],
                                   verify_num_requests=4, verify_slo_p99_ttft_ms=0.001)
    assert rc != 0
    assert "load test against %s/v1/completions FAILED (vllm_bench)" % server in out
    assert "| 2 | p99 TTFT |" in out and "<= 0.00 ms | FAIL |" in out
    assert "## SLO: FAIL" in (report / "summary.md").read_text()  # the report is written before failing


# The bound: verify_run_timeout (60 s) plus the playbook's own cost and the tool's
# imports (torch for vllm bench, evalscope's stack), which took up to ~120 s of the
# 182 s measured on the 2-core test machine at load 13.
@pytest.mark.parametrize("tool,bound", [("vllm_bench", 240), ("evalscope", 240)])
def test_stopped_server_fails_within_bound(tmp_path, tiny_model, tool, bound):
    # nothing listens on this port: the same as a stopped server
    dead = "http://127.0.0.1:%d" % free_port()
    rc, out, elapsed, report = run_role(tmp_path, dead, tiny_model, verify_tool=tool, verify_concurrency=[2], verify_num_requests=4,
                                        verify_request_timeout=15, verify_run_timeout=60)
    assert rc != 0
    assert "FAILED (%s)" % tool in out
    assert "successful requests" in out  # the table names the empty level
    if tool == "evalscope":
        assert "TimeoutError: Test connection failed" in out  # exit reason reported
    assert elapsed < bound, "took %.0f s" % elapsed
    assert (report / "summary.md").exists()
