# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # llmops.serving.gpustack.server: where the server is and how to reach it
    # (argument spec: gpustack.server_argument_spec()).
    SERVER = r"""
options:
  url:
    description: Base URL of the GPUStack server (API port), e.g. C(http://127.0.0.1:80).
    type: str
    required: true
  validate_certs:
    description: Verify TLS certificates.
    type: bool
    default: true
  timeout:
    description: Timeout of one HTTP request, in seconds.
    type: int
    default: 30
"""

    # llmops.serving.gpustack: the credentials; modules that talk to the API
    # use it together with llmops.serving.gpustack.server
    # (argument spec: gpustack.connection_argument_spec()). Kept as a plain
    # string: ansible-test's yamllint reads fragments without evaluating them.
    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - "API key sent as C(Authorization: Bearer <key>), e.g. the fixed custom key the
        C(llmops.serving.gpustack) role creates. Takes precedence over O(username)/O(password)."
    type: str
  username:
    description: User for the form login (C(POST /auth/login)) when no O(api_key) is given.
    type: str
    default: admin
  password:
    description: Password for the form login.
    type: str
"""
