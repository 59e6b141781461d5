#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Gather NVIDIA GPU facts (driver, CUDA, memory, ECC, MIG, processes) for vLLM hosts
version_added: "0.1.0"
description:
  - Reads the NVIDIA GPUs of the host and returns them as C(ansible_facts.llmops_gpu).
  - Uses NVML through C(nvidia-ml-py) (C(import pynvml)) when it is importable and NVML starts;
    otherwise runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) and
    C(nvidia-smi -q -x) and joins them on the PCI bus id.
  - Reports C(nvcc --version) when C(nvcc) is on the PATH or in C(/usr/local/cuda/bin).
  - A host without a driver (no C(nvidia-smi), or a driver that does not answer) is not an
    error - it is reported as C(mode=cpu) with the reason in C(error).
  - Read-only, never changes anything (C(changed=false)); runs the same in check mode.
options:
  backend:
    description:
      - C(auto) uses NVML when C(pynvml) imports and NVML initialises, else C(nvidia-smi).
      - C(nvml) or C(nvidia-smi) force one (C(nvml) falls back to C(cpu) mode when it cannot start).
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  nvidia_smi_path:
    description: Path of C(nvidia-smi). Default is to look it up on the PATH.
    type: path
  nvcc_path:
    description: Path of C(nvcc). Default is to look it up on the PATH and in C(/usr/local/cuda/bin).
    type: path
  disk_paths:
    description:
      - Paths to report free disk space for (C(disk) in the facts). A path that does not
        exist yet is measured at its nearest existing parent.
    type: list
    elements: path
    default: []
  timeout:
    description: Seconds to wait for each C(nvidia-smi) / C(nvcc) call (through coreutils C(timeout); 0 = no limit).
    type: int
    default: 30
  proc_devices:
    description: The kernel's device list the C(devices) facts read (its NVIDIA majors).
    type: path
    default: /proc/devices
  dev_dir:
    description:
      - Where the C(/dev/nvidia*) nodes are read; the facts name them as C(/dev/...) (the paths a unit names).
        Another tree for a chroot or a test bed.
    type: path
    default: /dev
notes:
  - Supports check mode.
  - The C(--query-gpu) field list matches the real capture in
    C(tests/fixtures/nvidia-smi/h200/probe.txt) so captures can be replayed.
requirements:
  - an NVIDIA driver for C(mode=cuda); C(nvidia-ml-py) optional
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the GPUs
  llmops.serving.gpu_info:
    disk_paths: [/opt/vllm, /srv/models]

- name: Show them
  ansible.builtin.debug:
    msg: "{{ llmops_gpu.mode }}: {{ llmops_gpu.gpu_names }} driver {{ llmops_gpu.driver_version }}"

- name: Force the nvidia-smi path (e.g. to compare with NVML)
  llmops.serving.gpu_info:
    backend: nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    llmops_gpu:
      description: GPU facts of the host.
      type: dict
      contains:
        mode:
          description: C(cuda) when at least one NVIDIA GPU answers, else C(cpu).
          type: str
          sample: cuda
        source:
          description: Where the facts came from (C(nvml), C(nvidia-smi) or C(none)).
          type: str
        error:
          description: Why the host is C(cpu) mode (or null).
          type: str
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "580.159.04"
        cuda_driver_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "13.0"
        nvidia_smi_path:
          description: Path of nvidia-smi, when found.
          type: str
        nvcc_path:
          description: Path of nvcc, when found.
          type: str
        nvcc_version:
          description: CUDA release of nvcc (C(13.0)), or null.
          type: str
        nvcc_build:
          description: Full nvcc version (C(13.0.88)), or null.
          type: str
        gpu_count:
          description: Number of GPUs.
          type: int
        gpu_names:
          description: Distinct GPU product names.
          type: list
          elements: str
        memory_total_mib:
          description: Sum of the GPUs' memory.
          type: int
        cuda_archs:
          description: FLASH_ATTN_CUDA_ARCHS entries for these GPUs (8.x->80, 9.0->90, 10.x->100, 12.x->120).
          type: list
          elements: str
          sample: ["90"]
        fabric:
          description: NVSwitch fabric state (C(present), C(states)).
          type: dict
        disk:
          description: Free space per requested path (C(path), C(checked_path), C(free_bytes), C(total_bytes)).
          type: list
          elements: dict
        devices:
          description:
            - The NVIDIA device nodes, what the vLLM units' device policy is derived from.
            - C(majors) (the NVIDIA names of C(/proc/devices) -> major), C(frontend) (the name of
              major 195, C(nvidia) or C(nvidia-frontend) by driver, null without a driver),
              C(nodes) (C(/dev/nvidia*) and C(/dev/nvidia-caps/*) -> C(MAJOR:MINOR)) and
              C(gpu_nodes) (GPU index -> its C(/dev/nvidiaN), N = the GPU's minor number).
          type: dict
          sample:
            majors: {nvidia: 195, nvidiactl: 195, nvidia-uvm: 238, nvidia-caps: 241}
            frontend: nvidia
            nodes: {/dev/nvidia0: "195:0", /dev/nvidiactl: "195:255", /dev/nvidia-uvm: "238:0"}
            gpu_nodes: {"0": /dev/nvidia0}
        gpus:
          description:
            - One entry per GPU with C(index), C(name), C(uuid), C(pci_bus_id),
              C(memory_total_mib), C(memory_used_mib), C(memory_free_mib), C(memory_reserved_mib),
              C(compute_capability) (C(9.0)), C(compute_capability_major), C(compute_capability_minor),
              C(flash_attn_arch), C(mig_mode_current), C(mig_mode_pending), C(mig_enabled), C(mig_devices),
              C(ecc_mode_current), C(ecc_enabled), C(ecc_volatile_uncorrectable), C(ecc_volatile_correctable),
              C(remapped_rows_pending), C(persistence_mode), C(persistence_enabled), C(power_draw_w),
              C(power_limit_w), C(temperature_c), C(utilization_gpu_pct),
              C(processes) (C(pid), C(name), C(type), C(used_memory_mib)), C(processes_memory_mib), C(fabric).
          type: list
          elements: dict
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.gpu import devices as gpu_devices
from ansible_collections.llmops.serving.plugins.module_utils.gpu import facts as gpu_facts
from ansible_collections.llmops.serving.plugins.module_utils.gpu import nvml as gpu_nvml
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi as gpu_smi


def _proc_name(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv0 = f.read().split(b"\0")[0].decode("utf-8", "replace")
        if argv0:
            return argv0
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _disk(paths):
    out = []
    for path in paths:
        checked = os.path.abspath(path)
        while not os.path.exists(checked) and checked != os.path.dirname(checked):
            checked = os.path.dirname(checked)
        try:
            st = os.statvfs(checked)
            out.append({"path": path, "checked_path": checked,
                        "free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize})
        except OSError:
            out.append({"path": path, "checked_path": None, "free_bytes": None, "total_bytes": None})
    return out


def _devices(gpus, proc_devices, dev_dir):
    """/proc/devices and the /dev/nvidia* nodes (the unit's device policy is derived from them)."""
    try:
        with open(proc_devices) as f:
            text = f.read()
    except (IOError, OSError):
        text = ""
    return gpu_devices.facts(text, gpu_devices.read_nodes(dev_dir), gpus)


def _run(module, argv):
    """run_command with a wall-clock limit (coreutils timeout when present)."""
    tbin = module.get_bin_path("timeout")
    if tbin and module.params["timeout"] > 0:
        argv = [tbin, str(module.params["timeout"])] + argv
    return module.run_command(argv)


def _from_smi(module, smi, nvcc_text, nvcc_path):
    fields = gpu_smi.QUERY_FIELDS
    rc, out, err = _run(module, gpu_smi.query_gpu_argv(smi, fields))
    if rc != 0 and "not a valid field" in (out + err):
        fields = gpu_smi.QUERY_FIELDS_LEGACY
        rc, out, err = _run(module, gpu_smi.query_gpu_argv(smi, fields))
    if rc != 0:
        text = (out + "\n" + err).strip()
        return gpu_facts.cpu_facts("nvidia-smi failed (rc=%s): %s" % (rc, text.splitlines()[0] if text else ""),
                                   smi, nvcc_text, nvcc_path)
    xrc, xout, xerr = _run(module, [smi, "-q", "-x"])
    xml_text = xout if xrc == 0 and xout.strip() else None
    facts = gpu_facts.facts_from_smi(out, xml_text, nvcc_text, smi, nvcc_path, fields)
    if xml_text is None:
        facts["warnings"] = ["nvidia-smi -q -x failed (rc=%s): ECC counters, processes and fabric unknown" % xrc]
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            backend=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia-smi"]),
            nvidia_smi_path=dict(type="path"),
            nvcc_path=dict(type="path"),
            disk_paths=dict(type="list", elements="path", default=[]),
            timeout=dict(type="int", default=30),
            proc_devices=dict(type="path", default="/proc/devices"),
            dev_dir=dict(type="path", default="/dev"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    smi = p["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    if smi and not os.access(smi, os.X_OK):
        smi = None
    nvcc = p["nvcc_path"] or module.get_bin_path("nvcc", opt_dirs=["/usr/local/cuda/bin"])
    nvcc_text = None
    if nvcc:
        rc, out, err = _run(module, [nvcc, "--version"])
        nvcc_text = out if rc == 0 else None

    facts = None
    nvml_error = None
    if p["backend"] in ("auto", "nvml"):
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            pynvml = None
            nvml_error = "pynvml (nvidia-ml-py) not importable"
        if pynvml is not None:
            try:
                driver, cuda, gpus = gpu_nvml.facts_from_nvml(pynvml, _proc_name)
                nvcc_parsed = gpu_smi.parse_nvcc_version(nvcc_text) if nvcc_text else None
                facts = gpu_facts.host_facts("cuda" if gpus else "cpu", "nvml", driver, cuda, gpus, nvcc_parsed,
                                             None if gpus else "NVML lists no GPU", smi, nvcc)
            except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                nvml_error = "NVML: %s" % (e,)
                facts = None
    if facts is None and p["backend"] in ("auto", "nvidia-smi"):
        if smi:
            try:
                facts = _from_smi(module, smi, nvcc_text, nvcc)
            except (ValueError, SyntaxError) as e:  # unparseable output: report, do not crash
                facts = gpu_facts.cpu_facts("cannot parse nvidia-smi output: %s" % e, smi, nvcc_text, nvcc)
                facts["traceback"] = traceback.format_exc()
        else:
            facts = gpu_facts.cpu_facts("no NVIDIA driver: nvidia-smi not found%s"
                                        % ("; " + nvml_error if nvml_error and p["backend"] == "auto" else ""),
                                        None, nvcc_text, nvcc)
    if facts is None:
        facts = gpu_facts.cpu_facts(nvml_error or "NVML unavailable", smi, nvcc_text, nvcc)
    facts["disk"] = _disk(p["disk_paths"])
    facts["devices"] = _devices(facts.get("gpus") or [], p["proc_devices"], p["dev_dir"])
    warnings = facts.pop("warnings", [])
    for w in warnings:
        module.warn(w)
    module.exit_json(changed=False, ansible_facts={"llmops_gpu": facts})


if __name__ == "__main__":
    main()
