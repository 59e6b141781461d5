# -*- coding: utf-8 -*-
"""/dev/shm for vLLM's mp executor (issue 31): following `distributed_executor_backend: mp` on a
host with a 64 MiB /dev/shm deployed, then rolled back ("160 MiB required"). The check runs on the
host before anything changes, against the host's real /dev/shm.

Readings: tests/fixtures/shm/statvfs.json (REAL statvfs + df -B1 of a 64 MiB tmpfs - the size
Docker gives a container's /dev/shm without --shm-size - and of the CI VM's /dev/shm, 2026-12-03)
and the H200's `df -h /dev/shm` line in tests/fixtures/h200-site-2026-12-03/probe.txt."""
import json
import os
import re

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.serving.plugins.module_utils import vllm_shm as S
from ansible_collections.llmops.serving.plugins.module_utils.vllm_args_check import ARGS_CHECK_SPEC, ArgsCheck

from conftest import FIXTURES

CAPTURE = json.load(open(os.path.join(FIXTURES, "shm", "statvfs.json")))
MIB = 1 << 20


def reading(name):
    c = CAPTURE[name]
    r = S.from_statvfs("/dev/shm", c["f_blocks"], c["f_frsize"], c["f_bavail"])
    # The same numbers df -B1 printed at the capture.
    size, used, avail = [int(x) for x in c["df_B1"].splitlines()[1].split()[1:4]]
    assert (r["size_bytes"], r["free_bytes"]) == (size, avail)
    return r


SHM_64M = reading("tmpfs-64m")
SHM_VM = reading("ci-vm-dev-shm")


def h200_shm():
    line = [x for x in open(os.path.join(FIXTURES, "h200-site-2026-12-03", "probe.txt")) if x.rstrip().endswith(" /dev/shm")][0]
    size = re.split(r"\s+", line.strip())[1]
    assert size.endswith("G")
    return {"path": "/dev/shm", "size_bytes": int(size[:-1]) << 30, "free_bytes": int(size[:-1]) << 30}


def entry(**kw):
    base = dict(index=0, name="a", tp=1, pp=1, dp=1, backend=None, backend_path=None, size_path=None, env={},
                spans=False)
    base.update(kw)
    return base


def test_the_executor_ring_is_the_160_mib_vllm_names():
    n = S.need(1, 2)
    assert round(n["executor"] / MIB) == 160  # "160 MiB required" (VLLM_MQ_MAX_CHUNK_BYTES_MB 16 x 10 chunks)
    assert round(n["responses"] / MIB) == 2 * 240
    assert round(n["total"] / MIB) == 640 and n["tp_groups"] == 0
    assert round(S.need(2, 1)["tp_groups"] / MIB) == 24
    assert round(S.need(1, 1, chunk_mb=4)["executor"] / MIB) == 40


def test_mp_backend_on_a_64_mib_shm_is_refused_naming_sizes_variable_and_fix():
    # The path: pipeline_parallel_size 2, then the suggested distributed_executor_backend: mp.
    msgs = S.check([entry(pp=2, backend="mp", backend_path="vllm_instances[0].args.distributed_executor_backend",
                          size_path="vllm_instances[0].args.pipeline_parallel_size")], SHM_64M, container=True)
    assert len(msgs) == 1
    m = msgs[0]
    for needle in ("instance a (vllm_instances[0])", "distributed_executor_backend mp "
                   "(vllm_instances[0].args.distributed_executor_backend)", "1 x 2", "needs 640 MiB of /dev/shm",
                   "160 MiB executor broadcast ring", "2 worker response rings of 240 MiB",
                   "/dev/shm on this host is 64 MiB (64 MiB free)", "--shm-size=1g", "distributed_executor_backend: uni"):
        assert needle in m, (needle, m)
    assert "mount -o remount" not in m


def test_the_fix_fits_the_host_a_vm_gets_the_tmpfs_remount():
    m = S.check([entry(tp=2, backend="mp", backend_path="vllm_common_args.distributed_executor_backend")],
                SHM_64M, container=False)[0]
    assert "mount -o remount,size=1G /dev/shm" in m and "/etc/fstab" in m and "--shm-size" not in m
    assert "24 MiB tensor-parallel broadcaster" in m


def test_unset_backend_with_more_than_one_worker_is_vllms_default_mp():
    m = S.check([entry(tp=2, size_path="vllm_instances[0].args.tensor_parallel_size")], SHM_64M)[0]
    assert "vLLM's default executor mp for 2 workers (vllm_instances[0].args.tensor_parallel_size)" in m


@pytest.mark.parametrize("e", [entry(), entry(backend="uni"), entry(tp=2, pp=2, backend="ray"),
                               entry(tp=2, spans=True)])
def test_no_ring_no_problem(e):
    assert S.check([e], SHM_64M) == []


def test_real_hosts_have_room():
    assert S.check([entry(tp=8, backend="mp", backend_path="x")], h200_shm()) == []
    assert S.check([entry(tp=2, pp=2, backend="mp", backend_path="x")], SHM_VM) == []


def test_instances_share_the_host_shm():
    one = entry(tp=2, backend="mp", backend_path="vllm_common_args.distributed_executor_backend")
    two = dict(one, index=1, name="b")
    small = dict(SHM_VM, size_bytes=int(S.need(2, 1)["total"] * 1.5))
    msgs = S.check([one, two], small)
    assert len(msgs) == 2 and all("with the other mp instances on this host" in m for m in msgs)
    assert S.check([one], small) == []


def test_smaller_chunks_from_the_env_lower_the_need():
    e = entry(backend="mp", backend_path="x", env={"VLLM_MQ_MAX_CHUNK_BYTES_MB": "4"})
    small = dict(SHM_64M, size_bytes=S.need(1, 1, chunk_mb=4)["total"])
    assert S.check([e], small) == []
    assert S.check([dict(e, env={})], small)


class HostWith64MiBShm(ArgsCheck):
    """The args check on a host whose /dev/shm reads as the captured 64 MiB tmpfs (a container)."""

    def host_shm(self):
        return SHM_64M, True


class NoModule(object):
    check_mode = False

    def get_bin_path(self, name):
        return None


def test_the_hosts_args_check_runs_it_before_any_change(tmp_path):
    inst = {"name": "a", "model": "/srv/models/tiny", "port": 18931, "args": {"pipeline_parallel_size": 2}}
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate({
        "instances": [inst], "common_args": {"distributed_executor_backend": "mp"},
        "python": str(tmp_path / "no-venv" / "bin" / "python"), "device": "cpu", "check_ports": False,
        "check_models": False})
    res = HostWith64MiBShm(NoModule()).run(checked.validated_parameters)
    shm = [p for p in res["problems"] if p["kind"] == "shm"]
    assert len(shm) == 1 and "vllm_common_args.distributed_executor_backend" in shm[0]["msg"]
    assert "needs 640 MiB of /dev/shm" in res["msg"]
    # The same instance with uni is the pipeline message's case, not this one.
    checked.validated_parameters["common_args"] = {"distributed_executor_backend": "uni"}
    res = HostWith64MiBShm(NoModule()).run(checked.validated_parameters)
    assert [p for p in res["problems"] if p["kind"] == "shm"] == []
