# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Predict each instance's KV cache from the model files on this host (config.json,
*.safetensors sizes) and the GPU facts: what ``vllm_kv_predict`` returns and
``vllm_report`` shows next to the measured capacity. The arithmetic is
``kv_capacity.predict``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os

from ansible_collections.llmops.serving.plugins.module_utils import kv_capacity
from ansible_collections.llmops.serving.plugins.module_utils.gpu import memory
from ansible_collections.llmops.serving.plugins.module_utils.gpu import weights as gpu_weights

# vllm_kv_predict's options and their defaults (what vllm_report passes).
PREDICT_DEFAULTS = {"gpus": [], "device": "auto", "cpu_kvcache_space_gib": None, "model_params_b": 0,
                    "dtype_bytes": 0}


class KvPredictor(object):
    """Reads the models on the host and predicts each instance's KV cache."""

    def __init__(self, params):
        self.p = params
        self.gpus = params["gpus"] or []
        dev = params["device"]
        self.device = dev if dev != "auto" else ("cuda" if self.gpus else "cpu")

    @staticmethod
    def read_model(path):
        """(config dict or None, safetensors bytes or None, number of files)."""
        if not path or not os.path.isabs(str(path)):
            return None, None, 0
        config = None
        cfg = os.path.join(path, "config.json")
        if os.path.isfile(cfg):
            with open(cfg) as f:
                config = json.load(f)
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        size = sum(os.path.getsize(f) for f in files) if files else None
        return config, size, len(files)

    def weights(self, config, size, nfiles):
        if self.p["model_params_b"]:
            return gpu_weights.estimate_weights(config, self.p["model_params_b"], self.p["dtype_bytes"] or None)
        if size:
            return {"bytes": int(size), "source": "safetensors", "files": nfiles}
        if config:
            try:
                w = gpu_weights.estimate_weights(config)
            except (KeyError, ValueError, TypeError):
                return None
            w["files"] = 0
            return w
        return None

    def one(self, view, used):
        config, size, nfiles = self.read_model(view.get("model"))
        out = {"name": view.get("name"), "model": view.get("model"), "config_found": config is not None,
               "weights": self.weights(config, size, nfiles), "gpus_used": used, "gpu_total_mib": None,
               "kv": None, "kv_skipped": None}
        if config is None:
            out["kv_skipped"] = ("%s: no config.json at %s (model not on the host yet, or not a local path)"
                                 % (view.get("name"), view.get("model")))
            return out
        if self.device == "cuda":
            if not used:
                out["kv_skipped"] = "%s: GPU placement invalid (see memory_total)" % view.get("name")
                return out
            by_index = dict((g.get("index"), g) for g in self.gpus)
            out["gpu_total_mib"] = min(by_index[i].get("memory_total_mib") or 0 for i in used)

        def opt(key):
            return memory.option(view, key)

        try:
            out["kv"] = kv_capacity.predict(
                config, device=self.device, gpu_memory_utilization=view.get("gpu_memory_utilization"),
                gpu_total_mib=out["gpu_total_mib"], weights_bytes=(out["weights"] or {}).get("bytes") or 0,
                tensor_parallel_size=view.get("tensor_parallel_size"),
                pipeline_parallel_size=view.get("pipeline_parallel_size"),
                kv_cache_dtype=opt("kv_cache_dtype") or "auto", max_model_len=view.get("max_model_len"),
                block_size=opt("block_size"), cpu_kvcache_space_gib=self.p["cpu_kvcache_space_gib"],
                kv_cache_memory_bytes=opt("kv_cache_memory_bytes"),
                max_num_batched_tokens=opt("max_num_batched_tokens"), max_num_seqs=opt("max_num_seqs"))
        except kv_capacity.KvPredictError as e:
            out["kv_skipped"] = "%s: %s" % (view.get("name"), e)
        return out

    def run(self):
        views = self.p["instances"]
        if self.device == "cuda":
            by_instance, _by_gpu, _errors = memory.placement(views, self.gpus)
        else:
            by_instance = {}
        return {"changed": False, "device": self.device,
                "instances": [self.one(v, by_instance.get(v.get("name"))) for v in views]}
