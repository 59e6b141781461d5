#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_args_check
short_description: Check vLLM options given as data with the installed vLLM's own parser, before anything restarts
version_added: "0.2.0"
description:
  - Read-only check of the vLLM server options of every instance of the
    C(vllm_service) role, run before any unit or environment file changes.
  - First rejects fictional or removed options (C(enable_flash_attn),
    C(use_v2_attention), C(grpc_port)/C(enable_grpc), C(speculative_model)/
    C(num_speculative_tokens), C(disable_log_requests), C(swap_space),
    C(gpu_cache_usage_perc), env C(VLLM_ATTENTION_BACKEND)) with the real
    replacement named, option keys written as raw flags (C(--x), spaces,
    C(=)), and keys the role sets itself (C(model), C(port), C(api_key), ...).
  - Then range checks - C(gpu_memory_utilization) in (0, 1], the GPUs an
    instance needs on this host <= GPUs assigned on CUDA hosts
    (C(tensor_parallel_size) x C(pipeline_parallel_size) x C(data_parallel_size);
    for an instance that spans hosts (C(nodes)) C(tensor_parallel_size) x
    C(pipeline_parallel_size) / the number of nodes, the GPUs each node runs),
    GPUs shared by instances whose memory shares add up to more than 1,
    C(kv_cache_dtype) choices, ports in 1024..65535 (the instance port rule), unique, and not bound by a
    process other than the instance's own C(vllm@NAME) unit.
  - Then renders each instance's argv exactly as the unit runs it (with
    O(view), the view's argv - the multi-node options C(--nnodes),
    C(--node-rank), C(--master-addr), C(--master-port), C(--headless) or
    C(--distributed-executor-backend ray) of a spanning instance included) and parses
    all of them in B(one) child process of O(python) with the installed
    vLLM's own server argument parser, its pre-load checks and
    C(AsyncEngineArgs) (no engine, no model load), plus the attention backend,
    quantization and C(speculative_config) keys. Errors are mapped back to the
    variable that produced the option (for example
    C(vllm_instances[0].args.max_model_len)).
  - Fails with every problem listed. Never changes anything (C(changed=false));
    runs in check mode too.
  - When O(python) does not exist yet (check mode on a host where vLLM is not
    installed), the parser check is skipped and reported (RV(parser_checked)
    false) unless O(require_parser=true). The same holds when the venv cannot import vLLM.
options:
  instances:
    description:
      - The role's C(vllm_instances) list. Each entry has C(name), C(model),
        optional C(served_model_name), C(host) (default C(127.0.0.1)),
        C(port) (default C(8000)), C(args) (dict of vLLM options), C(env)
        (dict) and C(gpus) (list of GPU indexes).
    type: list
    elements: dict
    required: true
  common_args:
    description: The role's C(vllm_common_args), merged under each instance's C(args) (the instance wins).
    type: dict
    default: {}
  common_env:
    description: The role's C(vllm_common_env).
    type: dict
    default: {}
  python:
    description: The vLLM venv's interpreter, for example C(/opt/vllm/venv/bin/python). It is the argv[0] of every instance.
    type: path
    required: true
  device:
    description: C(cuda) enables the GPU checks; C(cpu) skips them; C(auto) treats the host as C(cuda) when O(gpu_count) is given or C(/dev/nvidiactl) exists.
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  gpu_count:
    description: GPUs on the host, used for instances without C(gpus) and to check GPU indexes.
    type: int
  parser:
    description: Run the installed vLLM's parser check (about 20 s on 2 CPU cores, mostly importing vLLM).
    type: bool
    default: true
  require_parser:
    description: Fail when O(python) is missing instead of skipping the parser check.
    type: bool
    default: false
  check_ports:
    description: Look for listeners on the instances' ports (C(ss -Hltnp)) owned by something other than C(vllm@NAME).
    type: bool
    default: true
  default_gpu_memory_utilization:
    description:
      - Share of each GPU an instance without C(gpu_memory_utilization) takes
        (the role's C(vllm_default_gpu_memory_utilization); vLLM's default is 0.92).
    type: float
    default: 0.92
  view:
    description:
      - The instance view of O(instances) (C(vllm_view), from the C(llmops.serving.vllm_instance_view) filter;
        one entry per instance, in the same order). When given, the checks take each instance as it runs on
        this host - the options the role adds to an instance that spans hosts (the entry's C(multinode_args)),
        the GPUs it needs on this node (the entry's C(gpus_per_node)) and the argv the unit runs (the entry's
        C(argv)) - and, with O(check_models), the
        model of each instance is checked on the host too, before anything is installed - the directory exists
        (unless O(fail_on_missing_model=false)), the service user can read it, C(ProtectHome) does not hide it,
        a relative path or hub id is not used with C(HF_HUB_OFFLINE=1), and C(max_model_len) is not above the
        model's C(max_position_embeddings) (times the C(rope_scaling) factor) from its C(config.json).
      - Without it, the instances as given (an instance that spans hosts is parsed without the multi-node options).
    type: list
    elements: dict
  check_models:
    description: With O(view), check each instance's model on the host (see O(view)).
    type: bool
    default: true
  service_user:
    description: User the service runs as (for the model readability check). A user that does not exist yet owns nothing.
    type: str
    default: vllm
  service_group:
    description: Group of the service user.
    type: str
    default: vllm
  protect_home:
    description: The unit's C(ProtectHome) value (C(true)/C(tmpfs) hide /home, /root and /run/user).
    type: str
    default: "true"
  generated_models:
    description: Model paths the role generates later in the same run (skipped by the model checks).
    type: list
    elements: path
    default: []
  fail_on_missing_model:
    description: A missing model directory is a problem (false in check mode, where RV(missing_models) lists them).
    type: bool
    default: true
  timeout:
    description: Seconds the parser child may take.
    type: int
    default: 300
  cache_dir:
    description:
      - Directory for the parser results (root-only, mode 0700). The parser
        step is then skipped when the same argvs were already parsed by the
        same installed vLLM (key - the argvs, the parser code and the size and
        mtime of the venv's C(vllm*.dist-info) C(METADATA) and C(RECORD)),
        which makes a no-op re-run about 7 s faster per host on 2 cores.
        Another pip-installed vLLM or any changed option means a new key and
        a fresh parse. Only a passing parse is stored, and never in check
        mode; the file of an older key is removed. Unset, the parser always runs.
    type: path
requirements:
  - C(ss) (iproute2) on the target for O(check_ports)
  - the vLLM venv for O(parser)
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the vLLM options of every instance (before any template task)
  llmops.serving.vllm_args_check:
    instances: "{{ vllm_instances }}"
    common_args: "{{ vllm_common_args }}"
    common_env: "{{ vllm_common_env }}"
    python: "{{ vllm_venv }}/bin/python"
    device: "{{ _vllm_device }}"
  register: vllm_args_checked

- name: Only the fictional-flag and range checks (no vLLM needed)
  llmops.serving.vllm_args_check:
    instances:
      - name: qwen
        model: /srv/models/Qwen2.5-7B-Instruct
        port: 8000
        gpus: [0]
        args:
          gpu_memory_utilization: 0.9
          max_model_len: 8192
    python: /opt/vllm/venv/bin/python
    device: cuda
    parser: false
"""

RETURN = r"""
argv:
  description: Rendered argv of each instance, as its unit runs it (no secrets are ever in argv).
  returned: always
  type: dict
  sample: {"default": ["/opt/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/srv/models/tiny"]}
problems:
  description: Every problem found (empty when the options are valid).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Variable path, for example C(vllm_instances[0].args.swap_space).
      type: str
    option:
      description: The flag or key concerned, when known.
      type: str
    kind:
      description: fictional, raw_key, reserved, type, range, port, parser or engine.
      type: str
    msg:
      description: What is wrong and the fix.
      type: str
parser_checked:
  description: Whether the installed vLLM's parser checked the argv.
  returned: always
  type: bool
parser_skipped_reason:
  description: Why the parser check did not run.
  returned: when parser_checked is false
  type: str
parser_cached:
  description: Whether the parser result came from O(cache_dir) (same argvs, same installed vLLM) instead of a new parse.
  returned: when the parser step ran or was answered from the cache
  type: bool
vllm_version:
  description: Version of the vLLM that parsed the argv.
  returned: when parser_checked
  type: str
missing_models:
  description: Names of the instances whose model directory is missing (only with O(view)).
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds the parser child took (import, parser build, all instances).
  returned: when parser_checked
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_args_check import ARGS_CHECK_SPEC, ArgsCheck


def main():
    module = AnsibleModule(argument_spec=ARGS_CHECK_SPEC, supports_check_mode=True)
    result = ArgsCheck(module).run(module.params)
    if result["problems"]:
        module.fail_json(**result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
