# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""LoRA adapters of a vLLM instance, as data (issue 33 item 1).

An instance declares ``lora_adapters: [{name, path | source, base}]``: ``name``
is what clients send as ``model``, ``path`` the adapter directory on the host
(PEFT's ``adapter_config.json`` + ``adapter_model.safetensors``), or ``source``
the name of a ``models_list`` entry: the models role fetches the adapter once
(hub, mirror, controller), fans it out verified by sha256 and drift names a copy
that differs; its path is that entry's directory (``dest``, else
``models_dir``/NAME). ``base`` (optional) is the base model the adapter was
trained on when its ``adapter_config.json`` names it otherwise than the
instance's model does.

- ``check(index, inst)``: the inventory's problems (controller, before any change);
- ``options(inst)``: what the role adds to the instance's vLLM options -
  ``--enable-lora``, ``--max-loras`` (the number of adapters unless given),
  ``--lora-modules`` (one JSON entry per adapter, its base model named so that
  ``/v1/models`` shows the adapter's parent); ``--max-lora-rank`` stays the
  instance's (vLLM's default 16) and the host check says when an adapter needs more;
- ``check_on_host(entry, ident)``: on the host, before any change - the adapter
  is there and readable by the service user, is a LoRA adapter, was made for the
  instance's base model, its rank fits ``max_lora_rank`` and its target modules
  exist in the base model's weights. Every problem names the instance, the
  adapter, the variable and the fix;
- ``write_adapter(dest, model_dir, rank, targets)``: a real PEFT-format adapter
  for a local model (no download, no torch): the test bed's adapters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import io
import json
import os
import re
import struct

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ENTRY_KEYS = ("name", "path", "source", "base")
# vLLM's default --max-lora-rank (0.25-0.32).
DEFAULT_MAX_LORA_RANK = 16
# Options the list renders: set through lora_adapters, never by hand.
RENDERED = ("enable_lora", "lora_modules")
CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


def adapters(inst, model_dests=None):
    """The instance's adapters, normalized ([] when none); a ``source`` resolved to its models_list
    entry's directory (``model_dests``: model_source.dests)."""
    out = []
    for a in inst.get("lora_adapters") or []:
        path = a.get("path") or (model_dests or {}).get(a.get("source"))
        out.append({"name": str(a["name"]), "path": str(path), "base": str(a["base"]) if a.get("base") else None})
    return out


def _location_problem(here, a, model_dests):
    """The adapter's path or source, exactly one; a source must name a models_list entry."""
    path, source = a.get("path"), a.get("source")
    if path is not None and source is not None:
        return ("%s has both path and source: give one (source: the models_list entry the models role "
                "supplies; path: a directory already on the host)" % here)
    if source is not None:
        if isinstance(source, str) and source in model_dests:
            return None
        known = ", ".join(sorted(model_dests)) or "none"
        return ("%s.source %r is not the name of a models_list entry (names: %s): declare the adapter in "
                "models_list (source hf, modelscope, http or controller, see docs/models.md: fetched once, fanned "
                "out, verified by sha256) or give its path on the host" % (here, source, known))
    if not isinstance(path, str) or not path.startswith("/"):
        return ("%s.path %r must be the absolute path of the adapter directory on the host "
                "(adapter_config.json and its weights), or give source: a models_list entry's name"
                % (here, path))
    return None


def check(index, inst, model_dests=None):
    """Problems of ``inst``'s lora_adapters (list of str; empty = fine). ``model_dests``: the
    models_list entries' directories (model_source.dests), what ``source`` may name."""
    value = inst.get("lora_adapters")
    args = dict((vllm_args.normalize_key(k), v) for k, v in (inst.get("args") or {}).items())
    # checks.py names the instance before each message.
    var = "vllm_instances[%d].lora_adapters" % index
    problems = []
    if value is None:
        if "lora_modules" in args:
            problems.append("vllm_instances[%d].args.lora_modules is rendered by the role: list the adapters as "
                            "%s: [{name, path | source}] instead (the role adds --enable-lora, --max-loras and "
                            "--lora-modules, and checks each adapter against the base model before any change)"
                            % (index, var))
        return problems
    if not isinstance(value, (list, tuple)) or not value:
        return ["%s must be a non-empty list of {name, path | source[, base]} (or left out)" % var]
    for key in RENDERED:
        if key in args:
            problems.append("vllm_instances[%d].args.%s is rendered from %s: remove it from args"
                            % (index, key, var))
    if args.get("enable_lora") is False:
        problems.append("args.enable_lora is false but %s lists adapters" % var)
    served = inst.get("served_model_name")
    served = [str(s) for s in (served if isinstance(served, list) else [served or inst.get("model")])]
    seen = set()
    for j, a in enumerate(value):
        here = "%s[%d]" % (var, j)
        if not isinstance(a, dict):
            problems.append("%s must be a dict {name, path | source[, base]}, got %r" % (here, a))
            continue
        extra = sorted(set(a) - set(ENTRY_KEYS))
        if extra:
            problems.append("%s has unknown keys %s (known: %s)" % (here, ", ".join(extra), ", ".join(ENTRY_KEYS)))
        name = a.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append("%s.name %r must be the name clients send as model: letters, digits and ._:- "
                            "(128 at most, not starting with a sign)" % (here, name))
        elif name in seen:
            problems.append("%s.name %r is listed twice" % (here, name))
        elif name in served:
            problems.append("%s.name %r is the base model's served name: give the adapter its own name"
                            % (here, name))
        seen.add(name)
        where = _location_problem(here, a, model_dests or {})
        if where:
            problems.append(where)
    return problems


# vLLM reads VLLM_ALLOW_RUNTIME_LORA_UPDATING as on when it is 1 or true (any case; vllm/envs.py).
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
# One --lora-modules argument as systemd_exec writes it: a double-quoted JSON entry (or a bare word).
_MODULES_RE = re.compile(r'( --lora-modules)(?: (?:"(?:[^"\\]|\\.)*"|[^\s"]+))+?(?= --|[ \t]*$)', re.M)


def runtime_updating(env):
    """The instance's vLLM loads and unloads adapters at runtime (its environment turns the routes on)."""
    return str((env or {}).get(RUNTIME_ENV, "0")).strip().lower() in ("1", "true")


def dropin_key(text):
    """sha1 of a drop-in's text with the values of its --lora-modules left out: equal before and after a
    change of the adapter list alone. Computed on the controller (the rendered drop-in) and on the host
    (the drop-in there) with this one rule; the change plan then loads/unloads instead of restarting."""
    return hashlib.sha1(_MODULES_RE.sub(r"\1", text or "").encode("utf-8")).hexdigest()


def options(inst, model_dests=None):
    """The vLLM options the role adds for the instance's adapters ({} when none)."""
    found = adapters(inst, model_dests)
    if not found:
        return {}
    args = dict((vllm_args.normalize_key(k), v) for k, v in (inst.get("args") or {}).items())
    base = inst.get("served_model_name")
    base = (base[0] if isinstance(base, list) and base else base) or inst.get("model")
    out = {"enable_lora": True}
    if "max_loras" not in args:
        out["max_loras"] = len(found)
    out["lora_modules"] = [{"name": a["name"], "path": a["path"], "base_model_name": str(base)} for a in found]
    return out


# ----------------------------------------------------------------- on the host

def _load_json(path):
    with open(path) as f:
        return json.load(f)


def base_modules(model_dir):
    """The leaf names of the base model's weights (``q_proj``, ``v_proj``, ...), from the
    safetensors headers (the index when sharded); None when none can be read."""
    names = []
    index = os.path.join(model_dir, vllm_tiny_model.INDEX_FILE)
    try:
        if os.path.exists(index):
            names = list(_load_json(index).get("weight_map", {}))
        else:
            for f in sorted(os.listdir(model_dir)):
                if f.endswith(".safetensors"):
                    header = vllm_tiny_model.read_header(os.path.join(model_dir, f))[0]
                    names += [k for k in header if k != "__metadata__"]
    except (IOError, OSError, ValueError, struct.error):
        return None
    leaves = set()
    for n in names:
        parts = n.split(".")
        if len(parts) >= 2 and parts[-1] in ("weight", "bias"):
            leaves.add(parts[-2])
    return leaves or None


def _same_base(named, model, base):
    """The adapter's base_model_name_or_path names the instance's base model: equal, or the
    same last path part (a hub id vs its local copy), case-insensitive."""
    def last(s):
        return str(s).rstrip("/").rsplit("/", maxsplit=1)[-1].lower()
    wanted = [w for w in (base, model) if w]
    return any(str(named) == str(w) or last(named) == last(w) for w in wanted)


def check_on_host(entry, ident, unreadable):
    """Problems of one view entry's adapters on this host. ``entry``: name, index, model,
    lora_adapters, max_lora_rank; ``unreadable(path, ident)``: vllm_model_check's rule."""
    problems = []
    who = "instance %s (vllm_instances[%d])" % (entry["name"], entry["index"])
    max_rank = int(entry.get("max_lora_rank") or DEFAULT_MAX_LORA_RANK)
    model = str(entry["model"])
    modules = base_modules(model) if model.startswith("/") and os.path.isdir(model) else None
    for j, a in enumerate(entry.get("lora_adapters") or []):
        here = "%s: adapter %s (vllm_instances[%d].lora_adapters[%d])" % (who, a["name"], entry["index"], j)
        path = a["path"]
        if not os.path.isdir(path):
            problems.append("%s: %s is not a directory on this host: put the adapter there (adapter_config.json "
                            "and adapter_model.safetensors; one with a source in models_list: run "
                            "playbooks/models.yml, site.yml runs it first) and re-run; nothing was changed"
                            % (here, path))
            continue
        bad = unreadable(path, ident)
        if bad:
            problems.append("%s: %s cannot be read by the service user %s: %s. Make it readable (chmod -R o+rX, "
                            "or chgrp -R the service group)" % (here, path, ident.user, ", ".join(bad)))
            continue
        try:
            cfg = _load_json(os.path.join(path, CONFIG))
        except (IOError, OSError, ValueError) as exc:
            problems.append("%s: %s/%s cannot be read as JSON (%s): is it a PEFT LoRA adapter?"
                            % (here, path, CONFIG, exc))
            continue
        if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
            problems.append("%s: %s says peft_type %s: vLLM serves LoRA adapters only"
                            % (here, CONFIG, cfg.get("peft_type")))
            continue
        named = cfg.get("base_model_name_or_path")
        if named and not _same_base(named, model, a.get("base")):
            problems.append("%s: made for base model %r (base_model_name_or_path in %s), but the instance serves %s. "
                            "Serve it on an instance of that model, or - when it is the same model under another "
                            "name - say so with base: %r in the adapter's entry" % (here, named, CONFIG, model, named))
        rank = cfg.get("r")
        if isinstance(rank, int) and rank > max_rank:
            problems.append("%s: rank %d is above max_lora_rank %d: vLLM would refuse to load it. Set "
                            "vllm_instances[%d].args.max_lora_rank: %d (or more)"
                            % (here, rank, max_rank, entry["index"], rank))
        targets = cfg.get("target_modules")
        if modules is not None and isinstance(targets, list):
            missing = sorted(t for t in targets if t.split(".")[-1] not in modules)
            if missing:
                problems.append("%s: target modules %s are not in the base model's weights (%s has %s): it was made "
                                "for another architecture" % (here, ", ".join(missing), model,
                                                              ", ".join(sorted(modules))))
    return problems


# ----------------------------------------------------------------- a real adapter, locally

def adapter_specs(shape, rank, targets):
    """[(name, dims, init)] of a PEFT LoRA adapter of a Llama-shaped model: lora_A (rank x in),
    lora_B (out x rank; zeros, as PEFT initializes it) per layer and target module."""
    h, nh = shape["hidden_size"], shape["num_attention_heads"]
    nkv = shape.get("num_key_value_heads") or nh
    hd = h // nh
    dims = {"q_proj": (h, nh * hd), "k_proj": (h, nkv * hd), "v_proj": (h, nkv * hd), "o_proj": (nh * hd, h),
            "gate_proj": (h, shape["intermediate_size"]), "up_proj": (h, shape["intermediate_size"]),
            "down_proj": (shape["intermediate_size"], h)}
    specs = []
    for i in range(shape["num_hidden_layers"]):
        for t in targets:
            part = "self_attn" if t.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            name = "base_model.model.model.layers.%d.%s.%s" % (i, part, t)
            d_in, d_out = dims[t]
            specs.append((name + ".lora_A.weight", [rank, d_in], "normal"))
            specs.append((name + ".lora_B.weight", [d_out, rank], "zeros"))
    return specs


def _bf16(value):
    return struct.pack("<f", value)[2:4]


def write_adapter(dest, model_dir, rank=8, targets=("q_proj", "v_proj"), base_name=None, alpha=16):
    """Write a PEFT LoRA adapter for the Llama-shaped model in ``model_dir`` to ``dest``:
    adapter_config.json and adapter_model.safetensors (bf16; lora_A small fixed values,
    lora_B zeros). Returns the adapter's config."""
    shape = _load_json(os.path.join(model_dir, "config.json"))
    specs = adapter_specs(shape, int(rank), list(targets))
    shards = vllm_tiny_model.plan_shards(specs)
    shards[0]["file"] = WEIGHTS
    payload = io.BytesIO()
    pattern = _bf16(0.01) + _bf16(-0.01)
    for s in shards:
        for t in s["tensors"]:
            n = t["bytes"]
            payload.write(b"\0" * n if t["init"] == "zeros" else (pattern * (n // 4 + 1))[:n])
    payload.seek(0)
    os.makedirs(dest, exist_ok=True)
    vllm_tiny_model.write_shards(dest, shards, payload)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name or model_dir,
              "r": int(rank), "lora_alpha": int(alpha), "lora_dropout": 0.0, "bias": "none",
              "target_modules": list(targets), "fan_in_fan_out": False, "inference_mode": True}
    with open(os.path.join(dest, CONFIG), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return config
