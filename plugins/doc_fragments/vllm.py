# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Connection options of the modules that talk to a vLLM server
    # (argument spec: vllm_client.connection_argument_spec()).
    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the server, without C(/v1).
      - For a server bound to C(0.0.0.0), use C(http://127.0.0.1:PORT).
    type: str
    default: http://127.0.0.1:8000
  api_key:
    description:
      - "API key of the server (vLLM C(--api-key) or C(VLLM_API_KEY)); sent as
        C(Authorization: Bearer). vLLM protects C(/v1) only with it (not C(/health),
        C(/version) or C(/metrics)); a proxy in front may protect more. Never logged."
    type: str
  api_key_env_file:
    description:
      - Read the API key from C(VLLM_API_KEY) in this environment file on the target (the vllm_service
        role's root-only C(/etc/vllm/NAME.env); C(env_path) of the instance view) when O(api_key) is not
        given. The key then never passes through the controller. A missing file or variable means no key.
    type: path
  timeout:
    description: Timeout of each HTTP request, in seconds.
    type: float
    default: 10
requirements:
  - requests (in the vLLM virtualenv)
"""

    # llmops.serving.vllm.validate_certs: for the modules that take https URLs
    # (argument spec: connection_argument_spec(validate_certs=True)).
    VALIDATE_CERTS = r"""
options:
  validate_certs:
    description: Verify TLS certificates for C(https) URLs.
    type: bool
    default: true
"""
