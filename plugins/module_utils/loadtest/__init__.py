# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Parse load-test results (EvalScope 1.14.1 perf, vLLM 0.32 ``vllm bench serve``)
into one normalized record per concurrency level, and evaluate SLOs.

Pure functions (stdlib only): used by the ``loadtest_results`` module on the
load-generator host and by the ``loadtest_*`` filters on the controller.

Normalized level (all latencies in milliseconds, ``None`` when the tool did
not report the figure)::

    tool, concurrency, requests, completed, failed, duration_s,
    request_throughput, output_throughput, total_token_throughput,
    ttft_mean_ms, ttft_p50_ms, ttft_p99_ms,
    tpot_mean_ms, tpot_p99_ms, itl_mean_ms, itl_p99_ms,
    e2el_mean_ms, e2el_p99_ms, source
Files: :mod:`.results` (the tools' result files -> levels), :mod:`.slo`
(targets and verdict), :mod:`.report` (Markdown tables, the report),
:mod:`.tuning` (sweeps: best value, table, plot input). Every name below is
importable from this package.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.loadtest.results import (  # noqa: F401
    EVALSCOPE_DIR_RE, LEVEL_KEYS, TOOLS, LoadTestError, find_evalscope_dirs, load_evalscope, load_results,
    load_vllm_bench, normalize_evalscope, normalize_vllm_bench, sort_levels)
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.slo import (  # noqa: F401
    SLO_KEYS, SLO_SPEC, clean_slo, evaluate_slo)
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.report import (  # noqa: F401
    LEVEL_COLUMNS, render_levels_table, render_slo_table, render_summary)
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.tuning import (  # noqa: F401
    OBJECTIVES, best_value, pick_level, plot_data, render_sweep_table)
