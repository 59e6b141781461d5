#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_kv_predict
short_description: Predict the KV-cache capacity of vLLM instances before they are deployed
version_added: "0.2.0"
description:
  - "For each instance, reads the model's C(config.json) and the sizes of its C(*.safetensors) files
    on the host and predicts what vLLM will log at start (C(KV cache size: N tokens, Maximum
    concurrency for M tokens per request)) without starting vLLM: KV bytes per token, KV memory,
    blocks, tokens and max concurrency for C(max_model_len)."
  - On CPU the KV space is C(VLLM_CPU_KVCACHE_SPACE) GiB (O(cpu_kvcache_space_gib)) and the
    prediction is exact. On GPU the non-KV memory (weights, activations, non-torch memory, CUDA
    graphs) that vLLM profiles at start is estimated (weights per GPU + an activation term + a
    fixed overhead fitted on two real H200 runs); C(margin_bytes) in RV(instances[].kv) gives the stated
    margin. See docs/kv_prediction.md.
  - C(refusal) in RV(instances[].kv) is set when the prediction says vLLM will refuse to start
    (C(weights_exceed_share), C(no_kv_memory), C(sequence_exceeds_kv)); the C(gpu_preflight)
    role fails on it with a message naming the variables.
  - Read-only, pure Python (no vLLM needed); C(changed) is always C(false); check mode runs the same reads.
    A model that is not on the host yet is reported as data (RV(instances[].kv_skipped)).
options:
  instances:
    description:
      - "Instance view entries (the C(vllm_view) fact of the C(llmops.serving.vllm_service) role's
        C(view) entry point): C(name), C(model), C(gpus), C(tensor_parallel_size), C(pipeline_parallel_size),
        C(gpus_per_node) (the GPUs it runs on in this host; an entry without it - TP x PP, or TP x PP / the
        number of C(nodes)), C(gpu_memory_utilization), C(max_model_len), and C(args) (the options it runs with) for C(kv_cache_dtype),
        C(block_size), C(max_num_seqs), C(max_num_batched_tokens), C(kv_cache_memory_bytes)."
      - No secrets are needed or read.
    type: list
    elements: dict
    required: true
  gpus:
    description: The GPUs of the host (C(llmops_gpu.gpus) from M(llmops.serving.gpu_info)).
    type: list
    elements: dict
    default: []
  device:
    description: C(auto) = C(cuda) when O(gpus) is not empty, else C(cpu).
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  cpu_kvcache_space_gib:
    description: KV space of the CPU build in GiB (C(VLLM_CPU_KVCACHE_SPACE), role variable C(vllm_cpu_kvcache_space_gib)).
    type: float
  model_params_b:
    description: Parameters in billions for instances whose weights are not on the host (wins when > 0).
    type: float
    default: 0
  dtype_bytes:
    description: Bytes per weight with O(model_params_b); 0 reads the config (default 2).
    type: float
    default: 0
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Predict the KV cache of the instances this host will run
  llmops.serving.vllm_kv_predict:
    instances: "{{ vllm_view }}"
    gpus: "{{ llmops_gpu.gpus }}"
  register: kv

- name: Show predicted tokens
  ansible.builtin.debug:
    msg: "{{ kv.instances | map(attribute='kv.tokens', default=none) | list }}"
"""

RETURN = r"""
device:
  description: The device the prediction is for.
  returned: always
  type: str
  sample: cuda
instances:
  description: One entry per instance, in input order.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Instance name., type: str}
    model: {description: Model path., type: str}
    config_found: {description: Whether C(config.json) was read., type: bool}
    weights:
      description: C(bytes), C(source) (C(safetensors), C(config.json) or C(params_b)), C(files); null when unknown.
      type: dict
    gpus_used: {description: GPU indices the instance runs on (null on CPU)., type: list, elements: int}
    gpu_total_mib: {description: Memory of the smallest GPU the instance uses., type: int}
    kv:
      description:
        - The prediction (null when skipped) - C(bytes_per_token) (one GPU), C(available_bytes) (KV
          memory per GPU), C(blocks), C(tokens), C(block_size), C(max_model_len), C(max_concurrency),
          C(sequence_bytes), C(budget_bytes), C(non_kv_bytes), C(weights_per_gpu_bytes),
          C(activation_bytes), C(fixed_overhead_bytes), C(exact), C(margin_bytes), C(refusal).
      type: dict
    kv_skipped: {description: Why there is no prediction (null otherwise)., type: str}
  sample:
    - name: default
      model: /srv/models/tiny
      config_found: true
      weights: {bytes: 2752512, source: safetensors, files: 1}
      gpus_used: null
      gpu_total_mib: null
      kv: {bytes_per_token: 512, available_bytes: 1073741824, blocks: 16384, tokens: 2097152, block_size: 128,
           max_model_len: 512, max_concurrency: 4096.0, exact: true, refusal: null}
      kv_skipped: null
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.kv_predict import KvPredictor


def main():
    module = AnsibleModule(
        argument_spec=dict(
            instances=dict(type="list", elements="dict", required=True),
            gpus=dict(type="list", elements="dict", default=[]),
            device=dict(type="str", choices=["auto", "cuda", "cpu"], default="auto"),
            cpu_kvcache_space_gib=dict(type="float"),
            model_params_b=dict(type="float", default=0),
            dtype_bytes=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    try:
        result = KvPredictor(module.params).run()
    except (OSError, ValueError) as e:
        module.fail_json(msg="vllm_kv_predict: %s" % e)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
