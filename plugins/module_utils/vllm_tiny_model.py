# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The tiny model's "already there" rule: shared by the vllm_tiny_model module
(which writes it) and the vllm_host_state module (the role's no-op check).

Pure Python, stdlib only (the host state runs with the host's bare python).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

# The module's option defaults (its argument_spec reads them from here).
DEFAULTS = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                intermediate_size=256, vocab_size=2048, max_position_embeddings=2048)
SHAPE_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
              "intermediate_size", "vocab_size", "max_position_embeddings")


def wanted_shape(params):
    """The config.json fields a model generated with these options has (missing options: the defaults)."""
    shape = dict((k, params.get(k) if params.get(k) is not None else DEFAULTS[k]) for k in SHAPE_KEYS)
    shape["architectures"] = ["LlamaForCausalLM"]
    return shape


def current_shape(path):
    """The shape of the model in ``path``; None when there is none (no config.json, tokenizer or weights)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, IOError, ValueError):
        return None
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        return None
    try:
        if not any(n.endswith(".safetensors") for n in os.listdir(path)):
            return None
    except OSError:
        return None
    shape = dict((k, cfg.get(k)) for k in SHAPE_KEYS)
    shape["architectures"] = cfg.get("architectures")
    return shape


def is_current(path, params):
    """True when ``path`` holds a model generated with these options (the module would write nothing)."""
    return current_shape(path) == wanted_shape(params)
