# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  url:
    description: Base URL of the GPUStack server (API port), e.g. C(http://127.0.0.1:80).
    type: str
    required: true
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
  validate_certs:
    description: Verify TLS certificates.
    type: bool
    default: true
  timeout:
    description: Timeout of one HTTP request, in seconds.
    type: int
    default: 30
"""
