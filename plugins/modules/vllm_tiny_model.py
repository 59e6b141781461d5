#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_tiny_model
short_description: Generate a tiny Llama model and tokenizer locally (no download)
version_added: "0.1.0"
description:
  - Writes a randomly initialised C(LlamaForCausalLM) with a byte-level BPE
    tokenizer trained on local text, with a chat template, into O(path).
  - Used by the demo, the tests and CI, where no model hub is reachable. The
    model answers real completions (gibberish text, real tokens), so a real
    vLLM server can be deployed, probed and load-tested end to end.
  - Idempotent; when O(path) already holds a model with the requested shape,
    nothing is written.
  - Run it with the vLLM virtualenv's interpreter (it needs C(torch),
    C(transformers) and C(tokenizers)).
options:
  path:
    description: Directory to write the model into.
    type: path
    required: true
  hidden_size:
    description: Hidden size.
    type: int
    default: 128
  num_attention_heads:
    description:
      - Attention heads. C(head_dim = hidden_size / num_attention_heads).
      - The vLLM CPU attention does not support C(head_dim=16); such a model
        passes C(/health) and kills the engine on its first request (used by
        the tests to produce a real degraded server).
    type: int
    default: 4
  num_key_value_heads:
    description: KV heads (grouped-query attention).
    type: int
    default: 2
  num_hidden_layers:
    description: Decoder layers.
    type: int
    default: 2
  intermediate_size:
    description: MLP width.
    type: int
    default: 256
  vocab_size:
    description: Tokenizer vocabulary size (byte-level BPE).
    type: int
    default: 2048
  max_position_embeddings:
    description: Longest context the config declares.
    type: int
    default: 2048
  seed:
    description: Random seed for the weights.
    type: int
    default: 0
  mode:
    description: Octal mode of the files written.
    type: str
    default: "0644"
requirements:
  - torch
  - transformers
  - tokenizers
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Generate the tiny model with the vLLM venv's Python
  llmops.serving.vllm_tiny_model:
    path: /srv/models/tiny
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python

- name: A model whose head_dim (16) the CPU attention cannot run
  llmops.serving.vllm_tiny_model:
    path: /srv/models/tiny-hd16
    num_attention_heads: 8
"""

RETURN = r"""
path:
  description: Model directory.
  returned: always
  type: str
head_dim:
  description: hidden_size / num_attention_heads.
  returned: always
  type: int
files:
  description: Files in the model directory.
  returned: always
  type: list
  elements: str
"""

import json
import os
import shutil
import sys
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmops.serving.plugins.module_utils.vllm_tiny_model import DEFAULTS, current_shape, wanted_shape

# The generator runs in a child interpreter: ansible-core 2.19 patches
# sys.intern in every module process, and torch._dynamo refuses to import
# under that patch. The child imports torch/transformers/tokenizers only.
GENERATOR = r'''
import json, os, sys, tempfile, shutil
params = json.loads(sys.argv[1]); dest = sys.argv[2]
try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from tokenizers import ByteLevelBPETokenizer
except ImportError as e:
    print("MISSING:%s" % e); raise SystemExit(3)
if dest == "--probe":
    raise SystemExit(0)
import argparse, textwrap, string, json.decoder
texts = []
for mod in (argparse, textwrap, json.decoder, string, tempfile, shutil):
    try:
        with open(mod.__file__, "r", encoding="utf-8") as f:
            texts.append(f.read())
    except (OSError, AttributeError, TypeError):
        pass
texts.append(" ".join(chr(c) for c in range(32, 127)))
torch.manual_seed(params["seed"])
tok = ByteLevelBPETokenizer()
tok.train_from_iterator(texts, vocab_size=params["vocab_size"], min_frequency=2,
                        special_tokens=["<s>", "</s>", "<unk>", "<pad>"], show_progress=False)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               unk_token="<unk>", pad_token="<pad>")
fast.chat_template = params["chat_template"]
fast.save_pretrained(dest)
cfg = LlamaConfig(
    hidden_size=params["hidden_size"], num_attention_heads=params["num_attention_heads"],
    num_key_value_heads=params["num_key_value_heads"], num_hidden_layers=params["num_hidden_layers"],
    intermediate_size=params["intermediate_size"], vocab_size=params["vocab_size"],
    max_position_embeddings=params["max_position_embeddings"],
    bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
    tie_word_embeddings=False, torch_dtype="bfloat16")
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(dest, safe_serialization=True)
'''

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            hidden_size=dict(type="int", default=DEFAULTS["hidden_size"]),
            num_attention_heads=dict(type="int", default=DEFAULTS["num_attention_heads"]),
            num_key_value_heads=dict(type="int", default=DEFAULTS["num_key_value_heads"], no_log=False),
            num_hidden_layers=dict(type="int", default=DEFAULTS["num_hidden_layers"]),
            intermediate_size=dict(type="int", default=DEFAULTS["intermediate_size"]),
            vocab_size=dict(type="int", default=DEFAULTS["vocab_size"]),
            max_position_embeddings=dict(type="int", default=DEFAULTS["max_position_embeddings"]),
            seed=dict(type="int", default=0),
            mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["hidden_size"] % p["num_attention_heads"]:
        module.fail_json(msg="hidden_size (%d) must be a multiple of num_attention_heads (%d)"
                         % (p["hidden_size"], p["num_attention_heads"]))
    if p["num_attention_heads"] % p["num_key_value_heads"]:
        module.fail_json(msg="num_attention_heads must be a multiple of num_key_value_heads")
    head_dim = p["hidden_size"] // p["num_attention_heads"]
    path = p["path"]
    wanted = wanted_shape(p)
    result = dict(changed=False, path=path, head_dim=head_dim, files=[])
    current = current_shape(path)
    if current == wanted:
        result["files"] = sorted(os.listdir(path))
        module.exit_json(**result)
    result["changed"] = True
    result["diff"] = dict(before=json.dumps(current, indent=1, sort_keys=True) + "\n" if current else "",
                          after=json.dumps(wanted, indent=1, sort_keys=True) + "\n",
                          before_header=path + "/config.json", after_header=path + "/config.json")
    if module.check_mode:
        module.exit_json(**result)
    gen_params = dict(p, chat_template=CHAT_TEMPLATE)
    rc, out, err = module.run_command([sys.executable, "-c", GENERATOR, json.dumps(gen_params), "--probe"])
    if rc != 0:
        module.fail_json(msg=missing_required_lib("torch, transformers and tokenizers")
                         + " Run this module with the vLLM venv's interpreter (ansible_python_interpreter).",
                         stdout=out, stderr=err)
    parent = os.path.dirname(path.rstrip("/")) or "/"
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    tmp = tempfile.mkdtemp(prefix=".tiny-model-", dir=parent)
    try:
        rc, out, err = module.run_command([sys.executable, "-c", GENERATOR, json.dumps(gen_params), tmp])
        if rc != 0:
            raise RuntimeError((err or out).strip().splitlines()[-1] if (err or out).strip() else "rc=%d" % rc)
        mode = int(p["mode"], 8)
        os.chmod(tmp, 0o755)
        for name in os.listdir(tmp):
            os.chmod(os.path.join(tmp, name), mode)
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.rename(tmp, path)
    except Exception as e:  # noqa: BLE001 - report any generation error as data
        shutil.rmtree(tmp, ignore_errors=True)
        module.fail_json(msg="could not generate the tiny model in %s: %s" % (path, e),
                         exception=traceback.format_exc())
    result["files"] = sorted(os.listdir(path))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
