#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: flash_attn_info
short_description: Report the flash-attn build in a virtualenv (version, build key, cubins, numeric check)
version_added: "0.1.0"
description:
  - Read-only. Runs the target virtualenv's interpreter O(python) in a child
    process (ansible-core 2.19 module processes cannot C(import torch)) and
    reports the installed C(flash-attn) version, the torch version and its
    CUDA, the C++11 ABI flag, the Python ABI tag and the build key for O(archs).
  - When C(cuobjdump) is found, lists the cubins of C(flash_attn_2_cuda*.so)
    with C(cuobjdump --list-elf) and reports which of O(archs) have none.
  - With O(numeric_check=true) (GPU hosts), compares C(flash_attn_func)
    (bf16, causal, head dims O(head_dims)) with torch SDPA in fp32 and
    returns the largest relative error.
  - Unavailability (no torch, no flash-attn, no cuobjdump, no GPU) is reported
    as data; the playbook decides what fails. Never changes anything.
options:
  python:
    description: Interpreter of the virtualenv to inspect (e.g. C(/opt/vllm/venv/bin/python)).
    type: path
    required: true
  archs:
    description:
      - FLASH_ATTN_CUDA_ARCHS values (C(80), C(90), C(100), C(120)) the build
        should cover. Used for the build key and the cubin check.
    type: list
    elements: str
    default: []
  flash_attn_version:
    description: Version for the build key. Default is the installed version.
    type: str
  state_file:
    description:
      - JSON file the flash_attn role writes after an install (C(key), C(wheel),
        C(sha256)); its key is returned as RV(installed_key).
    type: path
  numeric_check:
    description: Run C(flash_attn_func) against fp32 SDPA on the GPU.
    type: bool
    default: false
  head_dims:
    description: Head dimensions for the numeric check.
    type: list
    elements: int
    default: [64, 128]
  cuobjdump:
    description:
      - Path of C(cuobjdump). Default is C(PATH), then C($CUDA_HOME/bin),
        then C(/usr/local/cuda/bin).
    type: path
  timeout:
    description: Seconds the child interpreter may take.
    type: int
    default: 300
notes:
  - Supports check mode (it only reads).
requirements:
  - torch in the inspected virtualenv (reported as data when missing)
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Report flash-attn in the vLLM venv
  llmops.serving.flash_attn_info:
    python: /opt/vllm/venv/bin/python
    archs: ["90"]
  register: fa

- name: Numeric check on a GPU host
  llmops.serving.flash_attn_info:
    python: /opt/vllm/venv/bin/python
    archs: ["90"]
    numeric_check: true
  register: fa
  failed_when: fa.max_rel_error is none or fa.max_rel_error >= 0.01
"""

RETURN = r"""
available:
  description: Whether the child interpreter ran and torch imported.
  returned: always
  type: bool
msg:
  description: Why something is unavailable, or an empty string.
  returned: always
  type: str
flash_attn_version:
  description: Installed flash-attn version, null when not installed.
  returned: always
  type: str
torch_version:
  description: torch version including the local tag (e.g. C(2.11.0+cu130)).
  returned: always
  type: str
torch_cuda:
  description: CUDA version torch was built for (C(torch.version.cuda)), null for CPU builds.
  returned: always
  type: str
cxx11_abi:
  description: C(torch._C._GLIBCXX_USE_CXX11_ABI).
  returned: always
  type: bool
python_tag:
  description: Python ABI tag of the interpreter (e.g. C(cp312)).
  returned: always
  type: str
cuda_available:
  description: C(torch.cuda.is_available()).
  returned: always
  type: bool
devices:
  description: GPUs torch sees (index, name, compute_capability).
  returned: always
  type: list
  elements: dict
extension:
  description: Path of C(flash_attn_2_cuda*.so), null when absent.
  returned: always
  type: str
key:
  description: Build key (C(id) sha256, C(string) readable, C(fields)) for O(archs); null without torch or archs.
  returned: always
  type: dict
installed_key:
  description: Key recorded in O(state_file) by the last install, or null.
  returned: always
  type: str
cuobjdump:
  description: Path of the cuobjdump used, or null.
  returned: always
  type: str
cubins:
  description: Cubin count per arch found by C(cuobjdump --list-elf), keyed by arch (an H200 build of flash-attn 2.8.3.post2 has 72 cubins for C(90)).
  returned: always
  type: dict
cubins_checked:
  description: Whether cuobjdump ran on the extension.
  returned: always
  type: bool
missing_archs:
  description: Archs of O(archs) without any cubin (only meaningful when RV(cubins_checked)).
  returned: always
  type: list
  elements: str
numeric:
  description: Numeric check details (C(ran), C(per_head_dim), C(max_rel_error) or C(error)).
  returned: when O(numeric_check=true)
  type: dict
max_rel_error:
  description: Largest max|flash - sdpa| / max|sdpa| over O(head_dims), null when not run.
  returned: always
  type: float
"""

import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa


def _find_cuobjdump(explicit):
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if base:
            cand = os.path.join(base, "bin", "cuobjdump")
            if os.access(cand, os.X_OK):
                return cand
    return None


def _read_state(path):
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f).get("key")
    except (OSError, IOError, ValueError, AttributeError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            archs=dict(type="list", elements="str", default=[]),
            flash_attn_version=dict(type="str"),
            state_file=dict(type="path"),
            numeric_check=dict(type="bool", default=False),
            head_dims=dict(type="list", elements="int", default=[64, 128]),
            cuobjdump=dict(type="path"),
            timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, available=False, msg="", flash_attn_version=None, torch_version=None,
                  torch_cuda=None, cxx11_abi=None, python_tag=None, cuda_available=False, devices=[],
                  extension=None, key=None, installed_key=_read_state(p["state_file"]), cuobjdump=None,
                  cubins={}, cubins_checked=False, missing_archs=[], max_rel_error=None)
    archs = []
    if p["archs"]:
        try:
            archs = fa.validate_archs(p["archs"], var="archs")
        except fa.FlashAttnError as e:
            result["msg"] = str(e)
            module.fail_json(**result)

    if not os.access(p["python"], os.X_OK):
        result["msg"] = "interpreter %s not found or not executable (is the venv installed?)" % p["python"]
        module.exit_json(**result)

    child_args = dict(numeric_check=p["numeric_check"], head_dims=p["head_dims"])
    cmd = [p["python"], "-c", fa.PROBE_SCRIPT, json.dumps(child_args)]
    if p["timeout"]:
        timeout_bin = shutil.which("timeout")
        if timeout_bin:
            cmd = [timeout_bin, str(p["timeout"])] + cmd
    # cwd=/: `-c` puts the cwd on sys.path; never let a stray ./flash_attn shadow the install.
    rc, out, err = module.run_command(cmd, cwd="/")
    facts = fa.parse_probe_output(out)
    if facts is None:
        result["msg"] = "probe with %s failed (rc=%s): %s" % (
            p["python"], rc, (err or out).strip().splitlines()[-1] if (err or out).strip() else "no output")
        module.exit_json(**result)
    for k in ("flash_attn_version", "torch_version", "torch_cuda", "cxx11_abi", "python_tag",
              "cuda_available", "extension"):
        result[k] = facts.get(k)
    result["devices"] = facts.get("devices") or []
    if "numeric" in facts:
        result["numeric"] = facts["numeric"]
        result["max_rel_error"] = facts["numeric"].get("max_rel_error")
    if not facts.get("torch_version"):
        result["msg"] = "torch is not importable with %s: %s" % (p["python"], facts.get("torch_error", ""))
        module.exit_json(**result)
    result["available"] = True

    version = p["flash_attn_version"] or facts.get("flash_attn_version")
    if archs and version:
        result["key"] = fa.build_key(version, facts["torch_version"], facts.get("torch_cuda"),
                                     facts["python_tag"], archs, facts.get("cxx11_abi"))

    so = facts.get("extension")
    tool = _find_cuobjdump(p["cuobjdump"])
    result["cuobjdump"] = tool
    if so and tool:
        rc, out, err = module.run_command([tool, "--list-elf", so])
        if rc == 0:
            result["cubins"] = fa.parse_list_elf(out)
            result["cubins_checked"] = True
            result["missing_archs"] = fa.missing_archs(archs, result["cubins"])
        else:
            result["msg"] = "cuobjdump --list-elf %s failed: %s" % (so, (err or out).strip()[-300:])
    elif not so:
        result["msg"] = "flash_attn_2_cuda extension not found in the venv"
        result["missing_archs"] = list(archs)
    else:
        result["msg"] = "cuobjdump not found (PATH, CUDA_HOME/bin, /usr/local/cuda/bin): cubins not checked"
    module.exit_json(**result)


if __name__ == "__main__":
    main()
