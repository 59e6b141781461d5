#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_pull
short_description: Pull one file from an HTTP(S) mirror, resuming an interrupted transfer, verified by sha256
version_added: "0.4.0"
description:
  - Downloads O(url) to O(dest) on the host it runs on, for files too large to fetch again whole
    after an interruption (model shards of many GB over a slow link).
  - The bytes go to a partial file beside O(dest), C(DIR/.NAME.partial) (mode C(0600), owned by the
    user the module runs as), which survives an interruption (a lost connection, a timeout, a killed
    run). The next run asks for the rest only, with the header C(Range) C(bytes=N-) (N = the partial's length).
  - A C(206) answer whose C(Content-Range) starts at N (and ends at O(size) when O(size) is given)
    is appended to the partial. A C(200) answer (a server without range support, such as Python's
    C(http.server)) is written from byte 0. A C(416) answer, a C(206) for other bytes, or a partial
    longer than O(size) makes the module fetch from byte 0. RV(restarts) names each such case.
  - The sha256 is computed while the bytes arrive (the kept part of the partial is read once from
    disk). Only a file with the sha256 O(sha256) is moved in place, with C(os.rename) in the same
    directory, so O(dest) never holds partial or wrong bytes. O(owner), O(group) and O(mode) are set
    on the file before the move.
  - A complete file with another sha256 is removed. When the transfer had resumed a partial, that
    partial may have come from another version of the file (the mirror changed since), so the module
    fetches the file once more from byte 0 before it fails; a second mismatch (or a mismatch of a
    transfer that started at byte 0) fails naming O(dest), the expected and the found sha256, with
    the download removed and O(dest) unchanged. A stale partial therefore never wedges a host.
  - A broken transfer (connection lost, timeout, an HTTP error, fewer bytes than announced) fails
    and keeps the partial; a re-run, or the task's C(retries), resumes from there.
  - Idempotent. When O(dest) already has the sha256 O(sha256), nothing is fetched (C(changed) is
    false unless O(owner), O(group) or O(mode) differ and are set).
  - Asks for the C(identity) encoding (C(Accept-Encoding)) and never decompresses, so the offsets are those of the file.
options:
  url:
    description: HTTP or HTTPS URL of the file on the mirror.
    type: str
    required: true
  dest:
    description: Absolute path of the file on the host. Its directory must exist.
    type: path
    required: true
  sha256:
    description: Expected sha256 of the file (64 hex digits, as C(sha256sum) prints it).
    type: str
    required: true
  size:
    description:
      - Expected size of the file in bytes. Optional; when given, a partial of that size is verified
        without a request, a partial longer than that is fetched again from byte 0, and a C(206)
        answer must end at that size.
    type: int
  validate_certs:
    description: Verify the server's TLS certificate (HTTPS).
    type: bool
    default: true
  timeout:
    description: Seconds to wait for the connection and for each read of the transfer (not the whole transfer).
    type: int
    default: 60
  use_proxy:
    description: Use the proxy of the environment (C(https_proxy), C(http_proxy), C(no_proxy)).
    type: bool
    default: true
  url_username:
    description: User name for HTTP basic authentication on the mirror.
    type: str
  url_password:
    description: Password for HTTP basic authentication on the mirror (never logged).
    type: str
  force_basic_auth:
    description: Send the basic authentication header with the first request instead of waiting for a C(401).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.files
notes:
  - Supports check mode; it then reports what it would fetch and from which byte (RV(resumed_from)),
    and writes nothing.
  - The partial is not removed when the file is no longer wanted; it is removed (or used) by the next
    pull of the same O(dest). The models role never counts it as part of a model.
  - Hashing reads every byte of O(dest) once when it exists (about 1 GB/s per core).
  - The move is always C(os.rename) in the directory of O(dest); O(unsafe_writes) has no effect.
seealso:
  - module: ansible.builtin.get_url
    description: Fetches a whole file again after an interruption.
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Pull a shard from the site mirror (an interrupted transfer resumes on the next try)
  llmops.serving.model_pull:
    url: http://mirror.site:8080/models/qwen3-0.6b/model.safetensors
    dest: /srv/models/qwen3-0.6b/model.safetensors
    sha256: 7eac0f1e4a5c5e4f8d1c0b2a3e9f6d7c8b5a4e3f2d1c0b9a8f7e6d5c4b3a2f1e
    size: 1503300328
    owner: root
    group: vllm
    mode: "0640"
  register: pulled
  retries: 3
  delay: 5
  until: pulled is not failed
"""

RETURN = r"""
url:
  description: The URL pulled from.
  returned: always
  type: str
dest:
  description: The file's path on the host.
  returned: always
  type: str
partial:
  description: The partial file that holds the bytes until they are verified (C(DIR/.NAME.partial)).
  returned: always
  type: str
resumed_from:
  description:
    - Bytes of the file kept from the partial (the C(Range) offset); 0 when the file came from byte 0.
    - In check mode, the bytes a pull would keep.
  returned: always
  type: int
bytes_fetched:
  description: Bytes received from the mirror in this run (a restart from byte 0 counts both transfers).
  returned: always
  type: int
size:
  description: Size of the file in place, or null (check mode, or nothing in place).
  returned: always
  type: int
sha256:
  description: sha256 of the file in place, or null (check mode).
  returned: always
  type: str
status:
  description: HTTP status of the last answer (200, 206, 416, 404, ...); null when no request was made.
  returned: always
  type: int
restarts:
  description: Why the transfer went back to byte 0 (server without ranges, 416, a stale partial, ...), one line each.
  returned: always
  type: list
  elements: str
msg:
  description: What was done (or would be, in check mode), or why it failed.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llmops.serving.plugins.module_utils import model_pull as mp


def _opener(p):
    def opener(url, headers):
        return open_url(url, headers=headers, method="GET", validate_certs=p["validate_certs"], timeout=p["timeout"],
                        use_proxy=p["use_proxy"], url_username=p["url_username"], url_password=p["url_password"],
                        force_basic_auth=p["force_basic_auth"], decompress=False)
    return opener


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            sha256=dict(type="str", required=True),
            size=dict(type="int"),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
            use_proxy=dict(type="bool", default=True),
            url_username=dict(type="str"),
            url_password=dict(type="str", no_log=True),
            force_basic_auth=dict(type="bool", default=False),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    puller = None
    try:
        puller = mp.Puller(p["url"], p["dest"], p["sha256"], p["size"], _opener(p))
        result = puller.run(check_mode=module.check_mode)
    except mp.PullError as e:
        # What happened before the failure (bytes fetched, restarts) stays visible.
        data = dict(puller.result if puller else {}, url=p["url"], dest=p["dest"])
        data.pop("msg", None)
        if e.status is not None:
            data["status"] = e.status
        module.fail_json(msg=str(e), **data)
    pulled = result["changed"] and not module.check_mode
    # Owner, group and mode go on the verified partial before the move: dest appears with them.
    file_args = module.load_file_common_arguments(p, path=puller.partial if pulled else p["dest"])
    if pulled:
        module.set_fs_attributes_if_different(file_args, True)
        puller.move()
    elif not result["changed"]:
        result["changed"] = module.set_fs_attributes_if_different(file_args, False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
