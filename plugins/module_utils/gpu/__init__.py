# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""GPU module_utils, split by concern (pure Python, no Ansible imports):

* :mod:`.smi`: parsers for nvidia-smi (CSV, XML) and nvcc output;
* :mod:`.nvml`: the same facts through NVML (nvidia-ml-py);
* :mod:`.facts`: derived per-GPU keys and the host facts of ``gpu_info``;
* :mod:`.weights`: model weights estimate from config.json;
* :mod:`.memory`: what the host's vLLM instances need per GPU (summed where they share);
* :mod:`.checks`: the preflight checks, one function each, and the report.
"""
