# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The NVIDIA device nodes of a host and the systemd device policy of one vLLM instance.

A unit with ``DevicePolicy=closed`` opens only the devices its ``DeviceAllow=``
lines name. systemd resolves ``char-NAME`` against the names in
``/proc/devices`` and drops a line whose name the kernel does not list, so a
guessed group name locks CUDA out without an error: the NVIDIA frontend
(major 195, ``/dev/nvidiaN`` and ``/dev/nvidiactl``) is registered as
``nvidia-frontend`` by older proprietary modules and as ``nvidia`` by the
open modules and newer drivers (580.159.04 on the H200 here: ``195 nvidia``,
``195 nvidiactl``; a oneshot unit with ``DeviceAllow=char-nvidia-frontend``
failed ``torch.ones(4, device='cuda')`` with "No CUDA GPUs are available").

So the policy is derived from what the host has (``read_nodes`` on the host,
``facts`` for ``llmops_gpu.devices``) and names device nodes by path: systemd
stats a path when the unit starts, whatever the driver calls its major.

* ``/dev/nvidiaN`` of each GPU the instance runs on, and no other
  (``isolate``): hard isolation, not only ``CUDA_VISIBLE_DEVICES``. CUDA and
  NVML skip the GPUs whose node a process cannot open and number the rest from
  0 in PCI order (NVIDIA, nvidia-docker#170), so the instance's
  ``CUDA_VISIBLE_DEVICES`` is relative to the GPUs it can open
  (``cuda_visible_devices``), with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``;
* ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` (CUDA needs both) and
  ``/dev/nvidia-uvm-tools`` when the host has it;
* ``char-nvidia-caps`` when the kernel lists it (MIG access capabilities).

Without isolation the frontend major is allowed by the name the kernel gives
it (every GPU of the host).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re
import stat

FRONTEND_MAJOR = 195
# The name of major 195: older proprietary modules first, open modules / newer drivers second.
FRONTEND_NAMES = ("nvidia-frontend", "nvidia")
CTL = "/dev/nvidiactl"
UVM = "/dev/nvidia-uvm"
UVM_TOOLS = "/dev/nvidia-uvm-tools"
CAPS_NAME = "nvidia-caps"
# How the service user's unit would get the nodes it misses (it cannot create
# them itself: NoNewPrivileges stops the setuid nvidia-modprobe).
MODPROBE_FIX = ("create it as root before the unit starts: `%s`, e.g. from nvidia-persistenced or a udev rule "
                "at boot")


def parse_proc_devices(text):
    """The character devices of ``/proc/devices``: ``[(major, name), ...]`` in file order."""
    out = []
    section = None
    for line in (text or "").splitlines():
        s = line.strip()
        if not s:
            continue
        if s.endswith(":"):
            section = s[:-1].strip().lower()
            continue
        m = re.match(r"^(\d+)\s+(\S.*)$", s)
        if m and section in (None, "character devices"):
            out.append((int(m.group(1)), m.group(2).strip()))
    return out


def read_nodes(dev="/dev"):
    """On the host: ``{path: "MAJOR:MINOR"}`` of the NVIDIA character nodes under ``dev``
    (``nvidia*`` and ``nvidia-caps/*``), named as ``/dev/...`` (the paths the unit names,
    also when ``dev`` is another tree: a chroot, a test bed); a path that is not a character
    device maps to None."""
    out = {}
    for path in sorted(glob.glob(os.path.join(dev, "nvidia*")) + glob.glob(os.path.join(dev, "nvidia-caps", "*"))):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        name = "/dev/" + os.path.relpath(path, dev)
        out[name] = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else None
    return out


def parse_ls(text):
    """``{path: "MAJOR:MINOR"}`` from ``ls -l /dev/nvidia*`` output (captures from hosts)."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"^([cb-])\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s+.*?\s(/\S+)$", line.strip())
        if m and m.group(1) == "c":
            out[m.group(4)] = "%s:%s" % (m.group(2), m.group(3))
    return out


def facts(proc_devices_text, nodes, gpus):
    """``llmops_gpu.devices``: what the policy and the preflight read.

    ``gpus``: the GPU facts (``index``, ``minor_number``). Keys: ``majors``
    (NVIDIA names of /proc/devices -> major), ``frontend`` (the name of major
    195, or None when no driver registered it), ``nodes`` (path ->
    "MAJOR:MINOR" or None), ``gpu_nodes`` (GPU index as text -> its
    /dev/nvidiaN: N is the GPU's minor number, which need not be its index).
    """
    majors = {}
    for major, name in parse_proc_devices(proc_devices_text):
        if name.startswith("nvidia"):
            majors.setdefault(name, major)
    frontend = next((n for n in FRONTEND_NAMES if majors.get(n) == FRONTEND_MAJOR), None)
    gpu_nodes = {}
    for g in gpus or []:
        if g.get("index") is None:
            continue
        minor = g.get("minor_number")
        gpu_nodes[str(g["index"])] = "/dev/nvidia%s" % (minor if minor is not None else g["index"])
    return {"majors": majors, "frontend": frontend, "nodes": dict(nodes or {}), "gpu_nodes": gpu_nodes}


def instance_gpus(listed, world, host_indexes):
    """The GPU indexes an instance runs on: its ``gpus`` (the first ``world`` of them), else
    the host's first ``world`` GPUs (vLLM's own choice when CUDA_VISIBLE_DEVICES is unset)."""
    if listed:
        return [int(g) for g in listed][:max(int(world), 1)]
    host = sorted(int(i) for i in host_indexes) if host_indexes else list(range(max(int(world), 1)))
    return host[:max(int(world), 1)]


def resolve(allow, devices):
    """What ``DeviceAllow=`` values open on a host, as systemd resolves them when the unit starts:
    ``"MAJOR:MINOR"`` for a path (stat), ``"MAJOR:*"`` for each major ``/proc/devices`` gives
    ``char-NAME``; a path or name the host lacks opens nothing (systemd drops the line)."""
    majors = devices.get("majors") or {}
    nodes = devices.get("nodes") or {}
    out = set()
    for value in allow:
        target = value.split()[0]
        if target.startswith("char-"):
            name = target[len("char-"):]
            if name in majors:
                out.add("%d:*" % majors[name])
        elif nodes.get(target):
            out.add(nodes[target])
    return out


def _covered(majmin, opened):
    return majmin in opened or "%s:*" % majmin.split(":")[0] in opened


def _needed(gpus, gpu_nodes, devices):
    """The nodes CUDA opens for these GPUs, each with what it should be (or None: any char device)."""
    majors = devices.get("majors") or {}
    uvm = majors.get("nvidia-uvm")
    need = [(CTL, "%d:255" % FRONTEND_MAJOR, "the NVIDIA control device", "nvidia-modprobe"),
            (UVM, "%d:0" % uvm if uvm is not None else None, "CUDA's unified memory device",
             "modprobe nvidia-uvm && nvidia-modprobe -u -c=0")]
    for g, path in zip(gpus, gpu_nodes):
        minor = path[len("/dev/nvidia"):]
        need.append((path, "%d:%s" % (FRONTEND_MAJOR, minor), "GPU %d" % g, "nvidia-modprobe -c=%s" % minor))
    return need


def policy(gpu_indexes, devices, isolate=True):
    """The device policy of an instance on ``gpu_indexes``.

    ``devices``: ``llmops_gpu.devices`` (see :func:`facts`), or None when the
    host was not read (then the nodes are named by index). Returns
    ``allow`` (the ``DeviceAllow=`` values, in order), ``gpu_nodes`` (the
    GPUs' nodes), ``cuda_visible_devices`` (the ``CUDA_VISIBLE_DEVICES``
    value for these GPUs as the unit's processes number them) and
    ``problems``: every node CUDA needs that is missing, not the expected
    device, or not opened by ``allow`` as systemd resolves it on this host
    (:func:`check`).
    """
    known = devices is not None
    devices = devices or {}
    majors = devices.get("majors") or {}
    nodes = devices.get("nodes") or {}
    gpus = [int(g) for g in gpu_indexes]
    gpu_nodes = [(devices.get("gpu_nodes") or {}).get(str(g), "/dev/nvidia%d" % g) for g in gpus]
    tools = [UVM_TOOLS] if (not known or UVM_TOOLS in nodes) else []
    if isolate:
        allow = ["%s rw" % p for p in [CTL, UVM] + tools + gpu_nodes]
    else:
        names = [devices["frontend"]] if devices.get("frontend") else list(FRONTEND_NAMES)
        allow = ["char-%s rw" % n for n in names] + ["%s rw" % p for p in [UVM] + tools]
    if not known or CAPS_NAME in majors:
        allow.append("char-%s rw" % CAPS_NAME)
    order = sorted(gpus)
    visible = ",".join(str(order.index(g) if isolate else g) for g in gpus)
    return {"allow": allow, "gpu_nodes": gpu_nodes, "cuda_visible_devices": visible,
            "problems": check(allow, gpus, gpu_nodes, devices) if known else []}


def check(allow, gpus, gpu_nodes, devices):
    """Problems of a device policy on a host: each node CUDA needs for ``gpus`` must exist as the
    expected character device and be opened by ``allow`` (:func:`resolve`). Each names the node,
    the GPU, what is wrong and the fix."""
    majors = devices.get("majors") or {}
    nodes = devices.get("nodes") or {}
    problems = []
    frontend = next((n for n in FRONTEND_NAMES if majors.get(n) == FRONTEND_MAJOR), None)
    if frontend is None:
        problems.append("no NVIDIA driver registered major %d in /proc/devices (it lists %s). Fix: load the "
                        "NVIDIA kernel module (modprobe nvidia) and check `nvidia-smi`"
                        % (FRONTEND_MAJOR, ", ".join("%s %s" % (m, n) for n, m in sorted(majors.items()))
                           or "no nvidia device"))
    opened = resolve(allow, devices)
    for path, want, what, command in _needed(gpus, gpu_nodes, devices):
        have = nodes.get(path, "missing")
        fix = MODPROBE_FIX % command
        if have == "missing":
            problems.append("%s (%s) does not exist. Fix: %s" % (path, what, fix))
        elif have is None:
            problems.append("%s (%s) is not a character device. Fix: remove it and %s" % (path, what, fix))
        elif want is not None and have != want:
            problems.append("%s (%s) is device %s, not %s. Fix: remove it and %s" % (path, what, have, want, fix))
        elif not _covered(have, opened):
            problems.append(
                "%s (%s, device %s) is not opened by the unit's device policy (DeviceAllow=%s): /proc/devices "
                "names major %s %s. Fix: allow the node by path (the role's default, vllm_gpu_isolation: true)"
                % (path, what, have, ", ".join(a.split()[0] for a in allow), have.split(":")[0],
                   " and ".join(repr(n) for n, m in sorted(majors.items()) if str(m) == have.split(":")[0])
                   or "with no name"))
    return problems
