# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The generated model's rules: its shape (options, presets), the "already
there" rule shared by the vllm_tiny_model module (which writes it) and the
vllm_host_state module (the role's no-op check), the tensors of a Llama of
that shape, their safetensors shards (named and indexed like a hub
checkpoint), the streaming writer and the tokenizer padding.

Pure Python, stdlib only: the host state runs it with the host's bare python,
and the module's generator child runs this file's source ahead of its own
(the same plan() and write_shards() there, fed by torch one tensor at a time).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

# The module's shape defaults (the tiny test model), without a preset.
DEFAULTS = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                intermediate_size=256, vocab_size=2048, max_position_embeddings=2048, rope_theta=10000.0)
SHAPE_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
              "intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta")

# Real architectures' config shapes (their config.json on the hub), random weights.
# For start-up and memory figures only: the weights are noise.
PRESETS = {
    # meta-llama/Meta-Llama-3-8B: 8.03 B parameters, 16.06 GB in bf16, 4 shards on the hub.
    "llama3-8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32,
                      intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192,
                      rope_theta=500000.0),
    # meta-llama/Meta-Llama-3-70B: 70.55 B parameters, 141.1 GB in bf16, 30 shards on the hub.
    "llama3-70b": dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80,
                       intermediate_size=28672, vocab_size=128256, max_position_embeddings=8192,
                       rope_theta=500000.0),
}

# Config fields of a preset that are no part of the shape compared for idempotence.
PRESET_EXTRAS = {"llama3-8b": {"rms_norm_eps": 1e-05}, "llama3-70b": {"rms_norm_eps": 1e-05}}

DTYPE = "BF16"
DTYPE_BYTES = 2
INITIALIZER_RANGE = 0.02
# transformers' default max_shard_size ("5GB"): hub checkpoints are cut there.
DEFAULT_MAX_SHARD_BYTES = 5 * 10 ** 9
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Room for the tokenizer, config and headers on top of the weights.
FILES_MARGIN_BYTES = 64 * 1024 * 1024
CHUNK = 16 * 1024 * 1024


class ModelShapeError(ValueError):
    """An impossible shape (message names the options)."""


def resolve_shape(params):
    """The shape to write: DEFAULTS, then the preset's values, then every shape option given (not None)."""
    shape = dict(DEFAULTS)
    preset = params.get("preset")
    if preset:
        if preset not in PRESETS:
            raise ModelShapeError("preset %r is not one of %s" % (preset, ", ".join(sorted(PRESETS))))
        shape.update(PRESETS[preset])
    for k in SHAPE_KEYS:
        if params.get(k) is not None:
            shape[k] = params[k]
    shape["rope_theta"] = float(shape["rope_theta"])
    return shape


def check_shape(shape):
    """Problems of a shape, as messages naming the options (empty: fine)."""
    problems = []
    for k in SHAPE_KEYS:
        if k != "rope_theta" and int(shape[k]) < 1:
            problems.append("%s must be >= 1 (got %s)" % (k, shape[k]))
    if problems:
        return problems
    if shape["hidden_size"] % shape["num_attention_heads"]:
        problems.append("hidden_size (%d) must be a multiple of num_attention_heads (%d)"
                        % (shape["hidden_size"], shape["num_attention_heads"]))
    if shape["num_attention_heads"] % shape["num_key_value_heads"]:
        problems.append("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)"
                        % (shape["num_attention_heads"], shape["num_key_value_heads"]))
    return problems


def wanted_shape(params):
    """The config.json fields a model generated with these options has (missing options: preset, then defaults)."""
    shape = resolve_shape(params)
    shape["architectures"] = ["LlamaForCausalLM"]
    return shape


def _rope_theta(cfg):
    # transformers >= 5 writes rope_parameters.rope_theta, 4.x a top-level rope_theta.
    value = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    return float(value) if value is not None else None


def current_shape(path):
    """The shape of the model in ``path``; None when there is none (no config.json, tokenizer or all its weights)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, IOError, ValueError):
        return None
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        return None
    if not weights_complete(path):
        return None
    shape = dict((k, cfg.get(k)) for k in SHAPE_KEYS if k != "rope_theta")
    shape["rope_theta"] = _rope_theta(cfg)
    shape["architectures"] = cfg.get("architectures")
    return shape


def weights_complete(path):
    """True when ``path`` has its weights: every shard its index names, else a single *.safetensors."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    if INDEX_FILE in names:
        try:
            with open(os.path.join(path, INDEX_FILE)) as f:
                files = set((json.load(f).get("weight_map") or {}).values())
        except (OSError, IOError, ValueError, AttributeError):
            return False
        return bool(files) and all(os.path.isfile(os.path.join(path, n)) for n in files)
    return any(n.endswith(".safetensors") for n in names)


def is_current(path, params):
    """True when ``path`` holds a model generated with these options (the module would write nothing)."""
    return current_shape(path) == wanted_shape(params)


# ----------------------------------------------------------------- tensors and shards

def tensor_specs(shape):
    """[(name, shape, init)] of a LlamaForCausalLM in its state_dict order; init is "normal" or "ones"."""
    h, nh, nkv = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    inter, vocab = shape["intermediate_size"], shape["vocab_size"]
    hd = h // nh
    specs = [("model.embed_tokens.weight", [vocab, h], "normal")]
    for i in range(shape["num_hidden_layers"]):
        p = "model.layers.%d." % i
        specs += [
            (p + "self_attn.q_proj.weight", [nh * hd, h], "normal"),
            (p + "self_attn.k_proj.weight", [nkv * hd, h], "normal"),
            (p + "self_attn.v_proj.weight", [nkv * hd, h], "normal"),
            (p + "self_attn.o_proj.weight", [h, nh * hd], "normal"),
            (p + "mlp.gate_proj.weight", [inter, h], "normal"),
            (p + "mlp.up_proj.weight", [inter, h], "normal"),
            (p + "mlp.down_proj.weight", [h, inter], "normal"),
            (p + "input_layernorm.weight", [h], "ones"),
            (p + "post_attention_layernorm.weight", [h], "ones"),
        ]
    specs.append(("model.norm.weight", [h], "ones"))
    specs.append(("lm_head.weight", [vocab, h], "normal"))
    return specs


def nbytes(dims):
    n = DTYPE_BYTES
    for d in dims:
        n *= d
    return n


def shard_file_name(index, count):
    """The hub's names: model.safetensors alone, else model-00001-of-0000N.safetensors."""
    return SINGLE_FILE if count == 1 else "model-%05d-of-%05d.safetensors" % (index + 1, count)


def plan_shards(specs, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES):
    """Cut the tensors into shards as transformers does: a new shard when the next tensor
    would pass max_shard_bytes (a tensor larger than that gets a shard of its own).

    Returns [{"file", "tensors": [{"name", "shape", "init", "bytes", "offsets"}], "bytes", "header"}]."""
    groups, current, size = [], [], 0
    for name, dims, init in specs:
        b = nbytes(dims)
        if current and size + b > max_shard_bytes:
            groups.append(current)
            current, size = [], 0
        current.append({"name": name, "shape": list(dims), "init": init, "bytes": b})
        size += b
    if current:
        groups.append(current)
    shards = []
    for i, tensors in enumerate(groups):
        offset = 0
        for t in tensors:
            t["offsets"] = [offset, offset + t["bytes"]]
            offset += t["bytes"]
        shard = {"file": shard_file_name(i, len(groups)), "tensors": tensors, "bytes": offset}
        shard["header"] = header_bytes(shard)
        shards.append(shard)
    return shards


def header_bytes(shard):
    """The safetensors header of a shard: 8-byte little-endian length, then JSON padded with spaces to 8 bytes."""
    meta = {"__metadata__": {"format": "pt"}}
    for t in shard["tensors"]:
        meta[t["name"]] = {"dtype": DTYPE, "shape": t["shape"], "data_offsets": t["offsets"]}
    text = json.dumps(meta, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def index_json(shards):
    """model.safetensors.index.json of a sharded model (None for a single file)."""
    if len(shards) < 2:
        return None
    weight_map = {}
    for s in shards:
        for t in s["tensors"]:
            weight_map[t["name"]] = s["file"]
    return {"metadata": {"total_size": sum(s["bytes"] for s in shards)},
            "weight_map": dict(sorted(weight_map.items()))}


def plan(params, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES):
    """Everything the generation needs, from the options: shape, shards, bytes."""
    shape = resolve_shape(params)
    problems = check_shape(shape)
    if problems:
        raise ModelShapeError("; ".join(problems))
    shards = plan_shards(tensor_specs(shape), max_shard_bytes)
    weights = sum(len(s["header"]) + s["bytes"] for s in shards)
    params_count = sum(s["bytes"] for s in shards) // DTYPE_BYTES
    return {"shape": shape, "extra": dict(PRESET_EXTRAS.get(params.get("preset")) or {}),
            "head_dim": shape["hidden_size"] // shape["num_attention_heads"], "shards": shards,
            "weights_bytes": weights, "parameters": params_count,
            "needed_bytes": weights + FILES_MARGIN_BYTES}


def generator_tensors(shards):
    """The tensor list the generator child streams, in file order: [[name, shape, init], ...]."""
    return [[t["name"], t["shape"], t["init"]] for s in shards for t in s["tensors"]]


class ShortStream(IOError):
    """The generator's byte stream ended before every tensor was written."""


def write_shards(dest, shards, stream):
    """Write each shard into ``dest``: its header, then each tensor's bytes read from ``stream``
    (``read(n)``: the generator's tensors, drawn one at a time) in plan order, CHUNK bytes at a
    time. Writes the index for a sharded model.
    Returns the bytes written."""
    written = 0
    for s in shards:
        with open(os.path.join(dest, s["file"]), "wb") as f:
            f.write(s["header"])
            written += len(s["header"])
            for t in s["tensors"]:
                left = t["bytes"]
                while left:
                    chunk = stream.read(min(CHUNK, left))
                    if not chunk:
                        raise ShortStream("the generator stopped before the end of %s (%d of %d bytes missing)"
                                          % (t["name"], left, t["bytes"]))
                    f.write(chunk)
                    left -= len(chunk)
                    written += len(chunk)
    index = index_json(shards)
    if index is not None:
        text = json.dumps(index, indent=2) + "\n"
        with open(os.path.join(dest, INDEX_FILE), "w") as f:
            f.write(text)
        written += len(text)
    return written


def read_header(path):
    """The parsed safetensors header of a file (tests, and a reader's view of what was written)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n).decode("utf-8")), 8 + n


# ----------------------------------------------------------------- tokenizer

def pad_vocab(tokenizer, size):
    """Pad a trained byte-level BPE tokenizer (tokenizer.json as a dict) to ``size`` tokens with
    merges of its own tokens (pairs in id order, appended after the trained merges, so they rank
    last): every id the model's vocab_size allows then decodes to text. A tokenizer that already
    has ``size`` tokens or more is returned unchanged. Returns (tokenizer, tokens added)."""
    model = tokenizer["model"]
    vocab = model["vocab"]
    if len(vocab) >= size:
        return tokenizer, 0
    merges = model.setdefault("merges", [])
    as_pairs = not merges or isinstance(merges[0], list)
    special = set(t["content"] for t in tokenizer.get("added_tokens") or [])
    base = [t for t in sorted(vocab, key=vocab.get) if t not in special]
    added = 0
    for a in base:
        for b in base:
            if len(vocab) >= size:
                return tokenizer, added
            tok = a + b
            if tok in vocab:
                continue
            vocab[tok] = len(vocab)
            merges.append([a, b] if as_pairs else "%s %s" % (a, b))
            added += 1
    if len(vocab) < size:
        raise ModelShapeError("vocab_size %d: the tokenizer cannot be padded past %d tokens" % (size, len(vocab)))
    return tokenizer, added
