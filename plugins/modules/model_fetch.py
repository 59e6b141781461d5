#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch a model once (huggingface_hub, modelscope, controller directory) or read an HTTP mirror's manifest
version_added: "0.1.0"
description:
  - Runs where the model is fetched once (the controller or one designated host per site).
  - C(source=hf) calls the real C(huggingface_hub.snapshot_download) (C(repo_id),
    C(revision), C(allow_patterns), C(ignore_patterns), C(cache_dir), C(local_dir))
    in the interpreter O(python), in a child process; O(token) reaches it only
    as the C(HF_TOKEN) environment variable (never argv, never logged).
    C(HF_HUB_OFFLINE=1) in O(environment) makes the client answer from the cache only.
  - C(source=modelscope) does the same with C(modelscope.snapshot_download)
    (C(model_id) = O(repo_id)); O(token) goes through C(MODELSCOPE_API_TOKEN)
    and C(HubApi().login).
  - C(source=http) downloads nothing big. It reads the mirror's C(SHA256SUMS)
    at O(manifest_url) and asks the mirror for each file's size with C(HEAD), so a
    missing file fails the play before any host is written to.
  - C(source=controller) reads the directory O(path) where the module runs.
  - For C(hf), C(modelscope) and C(controller) the files the patterns select
    are hashed into RV(manifest) (the rules of the model_manifest module); with
    O(manifest) declared, a file missing from the source or of other bytes makes
    the model unavailable.
  - An unknown revision or repository, a missing client, an unreachable mirror
    or a missing file is returned as data (RV(available) false, RV(reason),
    RV(fix) naming the key to change); the role decides what fails.
  - Changes nothing on the hosts that serve the model; C(hf)/C(modelscope)
    write only into the client's cache or O(local_dir).
options:
  source:
    description: Where the model comes from.
    type: str
    required: true
    choices: [hf, modelscope, http, controller]
  path:
    description: C(controller) - the model directory (where the module runs).
    type: path
  repo_id:
    description: Hub id (C(org/name)) for C(hf) and C(modelscope).
    type: str
  revision:
    description: Branch, tag or commit for C(hf) and C(modelscope).
    type: str
  allow_patterns:
    description: Only these files (shell patterns).
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Never these files (shell patterns).
    type: list
    elements: str
    default: []
  cache_dir:
    description: The client's cache directory (default its own, e.g. C(~/.cache/huggingface/hub)).
    type: path
  local_dir:
    description: Download into this plain directory instead of the cache's snapshot tree.
    type: path
  token:
    description: Hub token. Passed through the child's environment only.
    type: str
  python:
    description:
      - Interpreter that has the hub client installed (e.g. C(/opt/vllm/venv/bin/python), whose vLLM pulls in huggingface_hub).
      - Default is the module's own.
    type: path
  environment:
    description: Extra environment for the child (e.g. C(HF_HUB_OFFLINE), C(HF_ENDPOINT) for a hub mirror).
    type: dict
    default: {}
  url:
    description: C(http) - base URL of the model directory on the mirror.
    type: str
  manifest_url:
    description: C(http) - URL of the C(SHA256SUMS) file. Default O(url) + C(SHA256SUMS).
    type: str
  manifest:
    description:
      - Expected manifest (as the model_manifest module takes it); the source must hold these files with these bytes.
      - C(http) - the mirror's C(SHA256SUMS) must agree with it.
    type: raw
  validate_certs:
    description: C(http) - verify TLS certificates.
    type: bool
    default: true
  timeout:
    description: Seconds for each HTTP request, and for the hub child process.
    type: int
    default: 3600
notes:
  - Supports check mode; C(hf)/C(modelscope) then only report what they would fetch.
requirements:
  - huggingface_hub (C(hf)) or modelscope (C(modelscope)) in O(python); reported as data when missing
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Fetch a pinned Hugging Face snapshot on the controller
  llmops.serving.model_fetch:
    source: hf
    repo_id: Qwen/Qwen3-0.6B
    revision: c1899de289a04d12100db370d81485cdf75e47ca
    allow_patterns: ["*.json", "*.safetensors", "*.txt"]
    token: "{{ vault_hf_token }}"
  delegate_to: localhost
  run_once: true
  register: fetched

- name: Read the site mirror's manifest
  llmops.serving.model_fetch:
    source: http
    url: http://mirror.site/models/qwen3-0.6b/
  delegate_to: localhost
  run_once: true
  register: mirror
"""

RETURN = r"""
available:
  description: Whether the model could be fetched (hub) or the mirror lists every file.
  returned: always
  type: bool
reason:
  description:
    - Short reason when unavailable (revision_not_found, repo_not_found, gated, not_cached, client_missing,
      mirror_unreachable, missing_files, mismatch, error).
  returned: always
  type: str
fix:
  description: The key to change when unavailable.
  returned: always
  type: str
msg:
  description: The client's or mirror's own message.
  returned: always
  type: str
path:
  description: Directory holding the fetched files (hub sources).
  returned: always
  type: str
resolved_revision:
  description: Commit the hub snapshot resolved to (the snapshot directory's name), or null.
  returned: always
  type: str
client_version:
  description: Version of the hub client that ran.
  returned: always
  type: str
manifest:
  description: The model's manifest (C(files) with path, size, sha256; C(total_bytes)); for C(http) the mirror's C(SHA256SUMS) with sizes from C(HEAD).
  returned: always
  type: dict
missing:
  description: Files the declared manifest (or, for C(http), the mirror's C(SHA256SUMS)) lists that the source does not hold.
  returned: always
  type: list
  elements: str
"""

import json
import os
import re
import sys
from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llmops.serving.plugins.module_utils import model_manifest as mm
from ansible_collections.llmops.serving.plugins.module_utils import model_source as ms


class ModelFetch(object):
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.result = dict(changed=False, available=False, reason="", fix="", msg="", path=None,
                           resolved_revision=None, client_version=None, manifest={}, missing=[])

    def unavailable(self, reason, fix, msg):
        self.result.update(reason=reason, fix=fix, msg=msg)
        return self.result

    def hub(self):
        p = self.p
        for key in ("repo_id", "revision"):
            if not p[key]:
                self.module.fail_json(msg="%s is required with source=%s" % (key, p["source"]))
        try:
            kwargs = ms.hub_kwargs(p["source"], p["repo_id"], p["revision"], p["allow_patterns"],
                                   p["ignore_patterns"], p["cache_dir"], p["local_dir"])
        except ms.ModelSpecError as e:
            self.module.fail_json(msg=str(e))
        python = p["python"] or sys.executable
        if not os.access(python, os.X_OK):
            return self.unavailable("client_missing", "models_fetch_python", "interpreter %s not found" % python)
        if self.module.check_mode:
            self.result.update(reason="check_mode", msg="check mode: would fetch %s@%s" % (p["repo_id"], p["revision"]))
            return self.result
        env = dict((k, str(v)) for k, v in (p["environment"] or {}).items())
        if p["token"]:
            env["HF_TOKEN" if p["source"] == "hf" else "MODELSCOPE_API_TOKEN"] = p["token"]
        cmd = [python, "-c", ms.CHILD_SCRIPT, json.dumps(dict(source=p["source"], kwargs=kwargs))]
        rc, out, err = self.module.run_command(cmd, cwd="/", environ_update=env)
        try:
            child = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return self.unavailable("error", "models_fetch_python", "hub client failed (rc=%s): %s" % (
                rc, (err or out).strip().splitlines()[-1] if (err or out).strip() else "no output"))
        self.result["client_version"] = child.get("client_version")
        if not child.get("ok"):
            reason, fix = ms.classify(child.get("reason"))
            return self.unavailable(reason, fix, child.get("msg") or child.get("reason"))
        path = child["path"]
        base = os.path.basename(os.path.normpath(path))
        self.result.update(resolved_revision=base if re.match(r"^[0-9a-f]{40}$", base) else None)
        return self.local(path)

    def local(self, path):
        """Manifest of a directory where the module runs (controller source, hub snapshot)."""
        p = self.p
        self.result["path"] = path
        if not os.path.isdir(path):
            return self.unavailable("missing_files", "path", "%s is not a directory" % path)
        try:
            expected = mm.normalize(p["manifest"], "manifest") if p["manifest"] is not None else None
        except mm.ManifestError as e:
            self.module.fail_json(msg=str(e))
        manifest = mm.compute(path, p["allow_patterns"], p["ignore_patterns"])
        if expected is not None:
            bad = mm.diff_manifests(expected, manifest)
            if bad:
                self.result["missing"] = sorted(k for k, v in bad.items() if v == "missing")
                return self.unavailable("missing_files" if self.result["missing"] else "mismatch", "manifest (or the source)",
                                        "%s does not hold the declared manifest: %s" % (
                                            path, ", ".join("%s (%s)" % kv for kv in sorted(bad.items()))))
            keep = set(f["path"] for f in expected["files"])
            manifest = dict(files=[f for f in manifest["files"] if f["path"] in keep])
            manifest["total_bytes"] = sum(f["size"] for f in manifest["files"])
        if not manifest["files"]:
            return self.unavailable("missing_files", "allow_patterns", "no file under %s matches the patterns" % path)
        self.result.update(available=True, manifest=manifest)
        return self.result

    def _open(self, url, method="GET"):
        return open_url(url, method=method, validate_certs=self.p["validate_certs"], timeout=self.p["timeout"])

    def http(self):
        p = self.p
        if not p["url"]:
            self.module.fail_json(msg="url is required with source=http")
        base = p["url"].rstrip("/") + "/"
        manifest_url = p["manifest_url"] or base + "SHA256SUMS"
        try:
            text = self._open(manifest_url).read().decode("utf-8")
        except Exception as e:  # mirror down, 404, TLS: data
            return self.unavailable("mirror_unreachable", "url / manifest_url", "%s: %s" % (manifest_url, e))
        try:
            served = mm.parse_sha256sums(text, manifest_url)
            expected = mm.normalize(p["manifest"], "manifest") if p["manifest"] is not None else None
        except mm.ManifestError as e:
            return self.unavailable("mismatch", "manifest", str(e))
        if expected is not None:
            want = dict((f["path"], f["sha256"]) for f in expected["files"])
            got = dict((f["path"], f["sha256"]) for f in served["files"])
            bad = sorted(k for k in want if got.get(k) != want[k])
            if bad:
                return self.unavailable("mismatch", "manifest", "the mirror's %s disagrees with the declared manifest "
                                        "for: %s" % (manifest_url, ", ".join(bad)))
            served = dict(files=[f for f in served["files"] if f["path"] in want])
        files = []
        for f in served["files"]:
            if not mm.selected(f["path"], p["allow_patterns"], p["ignore_patterns"]):
                continue
            try:
                resp = self._open(base + quote(f["path"]), method="HEAD")
                size = resp.headers.get("Content-Length")
                f = dict(f, size=int(size) if size is not None else f.get("size"))
            except Exception:
                self.result["missing"].append(f["path"])
            files.append(f)
        self.result["manifest"] = mm.normalize(files, manifest_url) if files else {}
        if self.result["missing"]:
            return self.unavailable("missing_files", "url (the mirror must serve every file of its SHA256SUMS)",
                                    "%s lists files the mirror does not serve: %s" % (
                                        manifest_url, ", ".join(self.result["missing"])))
        if not files:
            return self.unavailable("missing_files", "allow_patterns", "no file of %s matches the patterns" % manifest_url)
        self.result["available"] = True
        return self.result

    def run(self):
        if self.p["source"] == "http":
            return self.http()
        if self.p["source"] == "controller":
            if not self.p["path"]:
                self.module.fail_json(msg="path is required with source=controller")
            return self.local(self.p["path"])
        return self.hub()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", required=True, choices=["hf", "modelscope", "http", "controller"]),
            path=dict(type="path"),
            repo_id=dict(type="str"),
            revision=dict(type="str"),
            allow_patterns=dict(type="list", elements="str", default=[]),
            ignore_patterns=dict(type="list", elements="str", default=[]),
            cache_dir=dict(type="path"),
            local_dir=dict(type="path"),
            token=dict(type="str", no_log=True),
            python=dict(type="path"),
            environment=dict(type="dict", default={}),
            url=dict(type="str"),
            manifest_url=dict(type="str"),
            manifest=dict(type="raw"),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**ModelFetch(module).run())


if __name__ == "__main__":
    main()
