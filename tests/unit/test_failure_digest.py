"""scripts/failure-digest.py: the lines scripts/test.sh prints last, as CI shows
only the tail of `make test`. Read on a real molecule failure (fixtures/ci/)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "failure-digest.py"
RAY_FAILED = ROOT / "tests" / "fixtures" / "ci" / "molecule-ray-side-effect-failed.log"


def digest(name, log):
    out = subprocess.run([sys.executable, str(SCRIPT), name, str(log)],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def test_molecule_failure_names_action_host_task_and_message():
    lines = digest("molecule ray", RAY_FAILED)
    assert lines[0] == "molecule ray: FAILED"
    assert lines[1] == "  molecule ray failed in its side_effect action"
    # the failure that ended the play, not the expected (rescued) port-check
    # failures earlier in the same action
    assert lines[2] == ("  ray-head, task 'llmops.serving.ray_cluster : Restart the instance"
                        " on the head once its nodes are back':")
    assert lines[3].startswith("    Unable to restart service vllm@tp2.service: Job for vllm@tp2.service failed")
    assert len(lines) == 4
    assert not any("cannot reach" in line or "cannot listen" in line for line in lines)
    assert all(len(line) <= 330 for line in lines)


def test_pytest_failure_lists_failed_tests_and_summary(tmp_path):
    test = tmp_path / "test_x.py"
    test.write_text("def test_a():\n    assert 1 == 2, 'one is not two'\n\n"
                    "def test_b():\n    pass\n")
    log = tmp_path / "unit.log"
    with log.open("w") as f:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                       stdout=f, stderr=subprocess.STDOUT, check=False, cwd=tmp_path)
    lines = digest("unit", log)
    assert lines[0] == "unit: FAILED"
    assert lines[1].startswith("  FAILED test_x.py::test_a - AssertionError: one is not two")
    assert lines[2].startswith("  1 failed, 1 passed in ")


def test_other_log_gives_its_last_lines(tmp_path):
    log = tmp_path / "sanity.log"
    log.write_text("start\n\nplugins/modules/x.py:3:1: E128 continuation line\nERROR: 1 issue\n")
    assert digest("sanity", log) == [
        "sanity: FAILED", "  start", "  plugins/modules/x.py:3:1: E128 continuation line", "  ERROR: 1 issue"]


def test_missing_log_is_said(tmp_path):
    lines = digest("docs", tmp_path / "nope.log")
    assert lines[0].startswith("docs: FAILED (no log: ")


def test_post_mortem_of_the_failed_host_follows_the_message(tmp_path):
    """molecule-all.sh appends the nodes' post-mortem to a failed scenario's
    log. The post-mortem here is a real one (the ray scenario's nodes right
    after the side effect killed the worker's units, fixtures/ci/); it follows
    the real failed log as molecule-all.sh would write it."""
    post_mortem = ROOT / "tests" / "fixtures" / "ci" / "post-mortem-ray-worker-killed.txt"
    log = tmp_path / "ray.log"
    log.write_text(RAY_FAILED.read_text() + post_mortem.read_text() + "=== molecule destroy -s ray\n")
    lines = digest("molecule ray", log)
    assert lines[:2] == ["molecule ray: FAILED", "  molecule ray failed in its side_effect action"]
    # the failed host's post-mortem, after its message; ray-worker (no
    # failed unit, not a failed host) is left out
    assert lines[4] == "  ray-head: failed units: none; journal:"
    assert len(lines) == 8
    # its last lines, without the journal's timestamp and host
    assert lines[7].startswith("    vllm-tp2[1393]: (Worker pid=1393) INFO 12-03 04:02:22 [parallel_state.py:1906] world_size=2 rank=0")
    assert not any("ray-worker" in line for line in lines[4:])


def test_verifier_failure_names_the_test_and_its_assertion():
    """A real testinfra failure (molecule wraps the FAILED line over three)."""
    log = ROOT / "tests" / "fixtures" / "ci" / "molecule-vllm-service-verify-failed.log"
    assert digest("molecule vllm_service", log) == [
        "molecule vllm_service: FAILED",
        "  molecule vllm_service failed in its verify action",
        "  FAILED tests/test_monitoring.py::test_readiness_probe_textfile[ansible://vllm-svc]",
        "    E AssertionError: assert ['0'] == ['1']",
    ]
