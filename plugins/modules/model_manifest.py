#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_manifest
short_description: Compute a model directory's manifest (files, sizes, sha256) or check a copy against one
version_added: "0.1.0"
description:
  - Read-only. Without O(manifest) or O(sha256sums), walks O(path) and returns
    the manifest of the files the patterns select (relative path, size, sha256).
  - With O(manifest) or O(sha256sums), checks the copy under O(path) against it
    and names every file that is missing, of another size or sha256, or of
    another O(owner), O(group) or O(mode); files the manifest does not list
    are returned apart (RV(extra)) and never count as differences.
  - Always returns the free space of the filesystem that holds (or will hold)
    O(path), so a play can refuse a transfer that does not fit before writing.
  - A missing O(path) is data (RV(available) false when computing; every file
    missing when checking), not a failure. A malformed manifest fails.
options:
  path:
    description: Model directory (on the host the module runs on).
    type: path
    required: true
  allow_patterns:
    description: Shell patterns (fnmatch on the relative path, e.g. C(*.safetensors)); only matching files are listed. Empty = all.
    type: list
    elements: str
    default: []
  ignore_patterns:
    description:
      - Shell patterns of files never listed. C(.cache/*), C(.git/*), C(*.lock), C(*.incomplete) and the
        partial downloads of the model_pull module (C(.NAME.partial)) are always ignored.
    type: list
    elements: str
    default: []
  manifest:
    description:
      - "Expected manifest to check against, as C({files: [{path, sha256, size}]}),
        a list of C({path, sha256, size}), or a mapping C({path: sha256})."
    type: raw
  sha256sums:
    description: Expected manifest as C(sha256sum) output text (C(SHA256  PATH) lines), as HTTP mirrors publish it.
    type: str
  owner:
    description: Owner every listed file must have (checked only with a manifest).
    type: str
  group:
    description: Group every listed file must have (checked only with a manifest).
    type: str
  mode:
    description: Octal mode every listed file must have, e.g. C("0640") (checked only with a manifest).
    type: str
  checksum:
    description: Compare sha256 (else only presence and size).
    type: bool
    default: true
notes:
  - Supports check mode (it only reads).
  - "Reading every byte is the point: on a 2-core test node sha256 runs at about 1 GB/s."
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Manifest of a model on the controller
  llmops.serving.model_manifest:
    path: /srv/model-src/tiny
    allow_patterns: ["*.json", "*.safetensors", "*.txt", "*.model"]
  delegate_to: localhost
  register: src

- name: Check a host's copy
  llmops.serving.model_manifest:
    path: /srv/models/tiny
    manifest: "{{ src.manifest }}"
    owner: root
    group: vllm
    mode: "0640"
  register: copy
  failed_when: copy.differences | length > 0
"""

RETURN = r"""
available:
  description: Whether O(path) exists (computing) - false means nothing was listed.
  returned: always
  type: bool
msg:
  description: Why the path is unavailable, or an empty string.
  returned: always
  type: str
manifest:
  description: The computed manifest (C(files), C(total_bytes)) when no expected manifest was given; else the expected one, normalised.
  returned: always
  type: dict
differences:
  description: "One C({path, reason, expected, found}) per difference; reason is missing, size, sha256, not_a_file, owner, group or mode."
  returned: always
  type: list
  elements: dict
transfer:
  description: Paths whose content must be transferred (missing or of other bytes).
  returned: always
  type: list
  elements: str
extra:
  description: Files under O(path) the expected manifest does not list.
  returned: always
  type: list
  elements: str
in_sync:
  description: Whether RV(differences) is empty.
  returned: always
  type: bool
missing_bytes:
  description: Bytes of the files to transfer (null when the manifest lacks a needed size).
  returned: always
  type: int
free_bytes:
  description: Free bytes (f_bavail) on the filesystem of O(path) (or its nearest existing parent).
  returned: always
  type: int
filesystem_path:
  description: The existing directory whose filesystem RV(free_bytes) describes.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import model_manifest as mm


class ModelManifest(object):
    def __init__(self, params):
        self.p = params

    def expected(self):
        if self.p["manifest"] is not None and self.p["sha256sums"] is not None:
            raise mm.ManifestError("give manifest or sha256sums, not both")
        if self.p["manifest"] is not None:
            return mm.normalize(self.p["manifest"], "manifest")
        if self.p["sha256sums"] is not None:
            return mm.parse_sha256sums(self.p["sha256sums"], "sha256sums")
        return None

    def run(self):
        path = self.p["path"]
        free, fs_path = mm.free_bytes(path)
        result = dict(changed=False, available=os.path.isdir(path), msg="", manifest={}, differences=[],
                      transfer=[], extra=[], in_sync=False, missing_bytes=0, free_bytes=free,
                      filesystem_path=fs_path)
        expected = self.expected()
        if expected is None:
            if not result["available"]:
                result["msg"] = "%s is not a directory" % path
                return result
            result["manifest"] = mm.compute(path, self.p["allow_patterns"], self.p["ignore_patterns"])
            result["in_sync"] = True
            return result
        found = mm.compare(path, expected, owner=self.p["owner"], group=self.p["group"], mode=self.p["mode"],
                           checksum=self.p["checksum"])
        result.update(found, manifest=expected, transfer=mm.content_paths(found["differences"]),
                      in_sync=not found["differences"])
        if not result["available"]:
            result["msg"] = "%s is not a directory (every file is missing)" % path
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            allow_patterns=dict(type="list", elements="str", default=[]),
            ignore_patterns=dict(type="list", elements="str", default=[]),
            manifest=dict(type="raw"),
            sha256sums=dict(type="str"),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str"),
            checksum=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("manifest", "sha256sums")],
        supports_check_mode=True,
    )
    try:
        module.exit_json(**ModelManifest(module.params).run())
    except mm.ManifestError as e:
        module.fail_json(msg=str(e))


if __name__ == "__main__":
    main()
