#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_tiny_model
short_description: Generate a random-weight Llama model and its tokenizer locally (no download)
version_added: "0.1.0"
description:
  - Writes a randomly initialised C(LlamaForCausalLM) (bf16 safetensors) with a byte-level BPE
    tokenizer trained on local text, with a chat template, into O(path).
  - By default a tiny model (2 layers, hidden 128), used by the demo, the tests and CI, where no
    model hub is reachable. The model answers real completions (gibberish text, real tokens), so a
    real vLLM server can be deployed, probed and load-tested end to end.
  - With O(preset), the config shape of a real architecture (C(llama3-8b) - 32 layers, hidden 4096,
    32 heads / 8 KV heads, vocab 128256, 16.06 GB in 4 shards, as on the hub; C(llama3-70b) -
    141.1 GB in 30 shards). Such a model is for start-up and memory figures only (weight loading,
    torch.compile, CUDA graphs, KV cache size); its weights are noise, its answers gibberish.
  - The weights are drawn tensor by tensor (normal, std 0.02; norms 1) on the GPU when
    C(torch.cuda.is_available()), else on the CPU, and streamed straight into safetensors shards of
    at most O(max_shard_bytes), named and indexed like a hub checkpoint
    (C(model-00001-of-00004.safetensors) + C(model.safetensors.index.json); one
    C(model.safetensors) when the model fits one shard). No more than one tensor is in memory at a
    time.
  - The tokenizer has exactly C(vocab_size) tokens - the trained merges, then merges of its own
    tokens - so every id the model can sample decodes to text.
  - Fails before writing anything when the filesystem of O(path) has less free space than the
    model needs, naming the path, the bytes needed and the bytes free.
  - Idempotent; when O(path) already holds a model with the requested shape (its config.json, its
    tokenizer and every shard its index names), nothing is written.
  - Run it with the vLLM virtualenv's interpreter (it needs C(torch), C(transformers) and
    C(tokenizers)).
options:
  path:
    description: Directory to write the model into (replaced as a whole when its shape differs).
    type: path
    required: true
  preset:
    description:
      - A real architecture's config shape. The shape options below, when given, override the
        preset's values (for example a 2-layer model of Llama-3-8B's other dimensions).
      - Without it the shape options default to the tiny model's values.
    type: str
    choices: [llama3-8b, llama3-70b]
  hidden_size:
    description: Hidden size (default 128, or the preset's).
    type: int
  num_attention_heads:
    description:
      - Attention heads (default 4, or the preset's). C(head_dim = hidden_size / num_attention_heads).
      - The vLLM CPU attention does not support C(head_dim=16); such a model
        passes C(/health) and kills the engine on its first request (used by
        the tests to produce a real degraded server).
    type: int
  num_key_value_heads:
    description: KV heads, grouped-query attention (default 2, or the preset's).
    type: int
  num_hidden_layers:
    description: Decoder layers (default 2, or the preset's).
    type: int
  intermediate_size:
    description: MLP width (default 256, or the preset's).
    type: int
  vocab_size:
    description: Vocabulary size of the config and the tokenizer (default 2048, or the preset's).
    type: int
  max_position_embeddings:
    description: Longest context the config declares (default 2048, or the preset's).
    type: int
  rope_theta:
    description: RoPE base (default 10000.0, or the preset's, 500000.0 for Llama 3).
    type: float
  max_shard_bytes:
    description: Largest safetensors shard, in bytes (transformers' and the hub's 5 GB by default).
    type: int
    default: 5000000000
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

- name: A Llama-3-8B-shaped model (16 GB, random weights; start-up and memory figures only)
  llmops.serving.vllm_tiny_model:
    path: /srv/models/llama3-8b-random
    preset: llama3-8b
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python

- name: The same architecture cut to 2 layers of hidden 256 (a CPU test bed)
  llmops.serving.vllm_tiny_model:
    path: /srv/models/llama3-mini
    preset: llama3-8b
    num_hidden_layers: 2
    hidden_size: 256
    num_attention_heads: 4
    num_key_value_heads: 2
    intermediate_size: 512
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
shape:
  description: The config shape written (or found), after the preset and the options.
  returned: always
  type: dict
parameters:
  description: Number of parameters of the model.
  returned: always
  type: int
shards:
  description: Safetensors files of the model, in order.
  returned: always
  type: list
  elements: str
files:
  description: Files in the model directory.
  returned: always
  type: list
  elements: str
bytes_written:
  description: Bytes written by this run (0 when nothing changed).
  returned: always
  type: int
seconds:
  description: Seconds the generation took (0 when nothing changed).
  returned: always
  type: float
device:
  description: Where the weights were drawn, C(cuda) or C(cpu); null when nothing was written.
  returned: always
  type: str
tokenizer_padded:
  description: Tokens added to the trained tokenizer so that it has vocab_size tokens.
  returned: always
  type: int
"""

import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tm
from ansible_collections.llmops.serving.plugins.module_utils.model_manifest import free_bytes

# The generator runs in a child interpreter: ansible-core 2.19 patches
# sys.intern in every module process, and torch._dynamo refuses to import
# under that patch. The child's program is the source of
# module_utils/vllm_tiny_model.py (stdlib only) followed by GENERATOR: it
# plans the model with the same code (plan), writes the tokenizer and
# config.json into the directory it is given, and streams each tensor, drawn
# on the GPU when there is one, into the shards through write_shards - one
# tensor in memory at a time. Its last stdout line is a JSON summary.
GENERATOR = r'''
import json, os, sys, tempfile, shutil
params = json.loads(sys.argv[1]); dest = sys.argv[2]
try:
    import torch
    from transformers import GenerationConfig, LlamaConfig, PreTrainedTokenizerFast
    from tokenizers import ByteLevelBPETokenizer
except ImportError as e:
    print("MISSING:%s" % e); raise SystemExit(3)
if dest == "--probe":
    raise SystemExit(0)
model_plan = plan(params, params["max_shard_bytes"])
import argparse, textwrap, string, json.decoder
texts = []
for mod in (argparse, textwrap, json.decoder, string, tempfile, shutil):
    try:
        with open(mod.__file__, "r", encoding="utf-8") as f:
            texts.append(f.read())
    except (OSError, AttributeError, TypeError):
        pass
texts.append(" ".join(chr(c) for c in range(32, 127)))
shape = model_plan["shape"]
tok = ByteLevelBPETokenizer()
tok.train_from_iterator(texts, vocab_size=shape["vocab_size"], min_frequency=2,
                        special_tokens=["<s>", "</s>", "<unk>", "<pad>"], show_progress=False)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               unk_token="<unk>", pad_token="<pad>")
fast.chat_template = params["chat_template"]
fast.save_pretrained(dest)
cfg = LlamaConfig(
    hidden_size=shape["hidden_size"], num_attention_heads=shape["num_attention_heads"],
    num_key_value_heads=shape["num_key_value_heads"], num_hidden_layers=shape["num_hidden_layers"],
    intermediate_size=shape["intermediate_size"], vocab_size=shape["vocab_size"],
    max_position_embeddings=shape["max_position_embeddings"], rope_theta=shape["rope_theta"],
    bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
    tie_word_embeddings=False, torch_dtype="bfloat16", **model_plan["extra"])
cfg.architectures = ["LlamaForCausalLM"]
cfg.save_pretrained(dest)
GenerationConfig.from_model_config(cfg).save_pretrained(dest)
device = "cuda" if torch.cuda.is_available() else "cpu"


class TensorStream(object):
    """The tensors' bf16 bytes in plan order, drawn one at a time (normal, std INITIALIZER_RANGE; norms 1)."""

    def __init__(self):
        self.todo = iter(enumerate(generator_tensors(model_plan["shards"])))
        self.buf = memoryview(b"")

    def read(self, n):
        while not len(self.buf):
            nxt = next(self.todo, None)
            if nxt is None:
                return b""
            i, (name, dims, init) = nxt
            if init == "ones":
                t = torch.ones(dims, dtype=torch.bfloat16, device=device)
            else:
                g = torch.Generator(device=device)
                g.manual_seed(params["seed"] * 1000003 + i)
                t = torch.empty(dims, dtype=torch.bfloat16, device=device).normal_(0.0, INITIALIZER_RANGE, generator=g)
            self.buf = memoryview(t.cpu().contiguous().view(torch.uint8).numpy()).cast("B")
            del t
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


write_shards(dest, model_plan["shards"], TensorStream())
print(json.dumps({"device": device}))
'''

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TMP_PREFIX = ".tiny-model-"


def child_program():
    """module_utils/vllm_tiny_model.py's source, then GENERATOR (the same plan and writer here and there)."""
    return inspect.getsource(tm) + "\n" + GENERATOR


def generate(module, tmp):
    """Run the child into ``tmp``. Returns the device it drew the weights on."""
    params = dict((k, module.params[k]) for k in ("preset", "max_shard_bytes", "seed") + tm.SHAPE_KEYS)
    params["chat_template"] = CHAT_TEMPLATE
    rc, out, err = module.run_command([sys.executable, "-c", child_program(), json.dumps(params), tmp])
    lines = [line for line in (out or "").strip().splitlines() if line.strip()]
    if rc != 0 or not lines:
        last = [line for line in (err or out or "").strip().splitlines() if line.strip()][-1:] or ["rc=%d" % rc]
        raise RuntimeError("the generator failed (rc=%d): %s" % (rc, last[0]))
    return json.loads(lines[-1])["device"]


def pad_tokenizer(tmp, size):
    path = os.path.join(tmp, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    tokenizer, added = tm.pad_vocab(tokenizer, size)
    if added:
        with open(path, "w") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
    return added


def remove_stale_tmp(parent, name):
    """Directories a killed run of this module left for this path (a 16 GB model must not pile up)."""
    prefix = TMP_PREFIX + name + "-"
    for entry in os.listdir(parent):
        if entry.startswith(prefix) and os.path.isdir(os.path.join(parent, entry)):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            preset=dict(type="str", choices=sorted(tm.PRESETS)),
            hidden_size=dict(type="int"),
            num_attention_heads=dict(type="int"),
            num_key_value_heads=dict(type="int", no_log=False),
            num_hidden_layers=dict(type="int"),
            intermediate_size=dict(type="int"),
            vocab_size=dict(type="int"),
            max_position_embeddings=dict(type="int"),
            rope_theta=dict(type="float"),
            max_shard_bytes=dict(type="int", default=tm.DEFAULT_MAX_SHARD_BYTES),
            seed=dict(type="int", default=0),
            mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    if p["max_shard_bytes"] < 1:
        module.fail_json(msg="max_shard_bytes must be >= 1 (got %d)" % p["max_shard_bytes"])
    try:
        plan = tm.plan(p, p["max_shard_bytes"])
    except tm.ModelShapeError as e:
        module.fail_json(msg=str(e))
    wanted = tm.wanted_shape(p)
    result = dict(changed=False, path=path, head_dim=plan["head_dim"], shape=plan["shape"],
                  parameters=plan["parameters"], shards=[s["file"] for s in plan["shards"]], files=[],
                  bytes_written=0, seconds=0.0, device=None, tokenizer_padded=0)
    current = tm.current_shape(path)
    if current == wanted:
        result["files"] = sorted(os.listdir(path))
        module.exit_json(**result)
    result["changed"] = True
    result["diff"] = dict(before=json.dumps(current, indent=1, sort_keys=True) + "\n" if current else "",
                          after=json.dumps(wanted, indent=1, sort_keys=True) + "\n",
                          before_header=path + "/config.json", after_header=path + "/config.json")
    parent = os.path.dirname(path.rstrip("/")) or "/"
    free, fs_path = free_bytes(parent)
    if free < plan["needed_bytes"]:
        module.fail_json(msg="not enough disk space for the model at %s: it needs %d bytes (%.2f GiB), the filesystem "
                             "of %s has %d bytes (%.2f GiB) free. Free space there or choose another path."
                         % (path, plan["needed_bytes"], plan["needed_bytes"] / 2.0 ** 30, fs_path, free,
                            free / 2.0 ** 30), needed_bytes=plan["needed_bytes"], free_bytes=free)
    if module.check_mode:
        module.exit_json(**result)
    rc, out, err = module.run_command([sys.executable, "-c", child_program(), "{}", "--probe"])
    if rc != 0:
        module.fail_json(msg=missing_required_lib("torch, transformers and tokenizers")
                         + " Run this module with the vLLM venv's interpreter (ansible_python_interpreter).",
                         stdout=out, stderr=err)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    name = os.path.basename(path.rstrip("/"))
    remove_stale_tmp(parent, name)
    tmp = tempfile.mkdtemp(prefix=TMP_PREFIX + name + "-", dir=parent)
    started = time.monotonic()
    try:
        result["device"] = generate(module, tmp)
        result["tokenizer_padded"] = pad_tokenizer(tmp, plan["shape"]["vocab_size"])
        mode = int(p["mode"], 8)
        os.chmod(tmp, 0o755)
        for entry in os.listdir(tmp):
            os.chmod(os.path.join(tmp, entry), mode)
        result["bytes_written"] = dir_bytes(tmp)
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.rename(tmp, path)
    except Exception as e:  # noqa: BLE001 - report any generation error as data
        shutil.rmtree(tmp, ignore_errors=True)
        module.fail_json(msg="could not generate the model in %s: %s" % (path, e),
                         exception=traceback.format_exc())
    result["seconds"] = round(time.monotonic() - started, 2)
    result["files"] = sorted(os.listdir(path))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
