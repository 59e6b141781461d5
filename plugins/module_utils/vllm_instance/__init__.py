# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The instance view: every per-instance value of vllm_service, computed,
checked and quoted in one place.

Who does what:

- ``vllm_args.py`` RENDERS: options as data -> argv -> quoted ExecStart line;
- ``vllm_flags/`` VALIDATES options: fictional flags, ranges, parallel
  sizes, shared GPUs (and, on the host, the installed vLLM's own parser);
- this package COMPOSES both: ``build_view(instances, settings)`` returns one
  dict per instance (paths, unit, URL, argv, ExecStart, GPUs, whether it has
  a key, ...) and raises ``InstanceViewError`` - naming the instance, the
  variable and the fix - for every input that must fail before any change.

The view never holds a secret: API keys and secret-named environment values
only decide booleans (``has_api_key``) and are checked for control
characters. The key value is read by exactly one template (instance.env.j2)
through ``instance_api_key``.

``settings`` (built once by the role in roles/vllm_service/vars/main.yml):
python, install_dir, home, config_dir, unit_dir, device (cpu/cuda),
common_args, common_env, cpu_kvcache_space_gib, api_key, api_keys,
default_gpu_memory_utilization, gpu_count, allow_public_bind,
allow_unauthenticated_public_bind, gateway, warmup (dict or None).

Files: :mod:`.values` (what the others share: the error, secret names,
addresses, value parsing, the settings), :mod:`.env` (the key and the
environment: the inputs that may hold secrets), :mod:`.checks` (every rule:
``check``), :mod:`.view` (``build_view``), :mod:`.preflight` (the role-wide settings refused
before any change: ``preflight_problems``). Every name below is importable from
this package (``vllm_instance.build_view``, ``vllm_instance.InstanceViewError``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.values import (  # noqa: F401
    DEFAULT_HOST, DEFAULT_PORT, SECRET_WORDS, WILDCARDS, InstanceViewError, is_global_ip, is_loopback, is_secret_name,
    is_wildcard, normalize_settings, parse_model_len, probe_host, url_for)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.env import instance_api_key, instance_env  # noqa: F401
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.checks import PUBLIC_WHY, check  # noqa: F401
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.preflight import preflight_problems  # noqa: F401
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.view import WATCHDOG_STATE_DIR, build_view, instance_paths, snapshot_files  # noqa: F401
