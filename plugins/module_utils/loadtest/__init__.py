# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Load-test results (EvalScope 1.14.1 perf, vLLM 0.32 ``vllm bench serve``):
one normalized record per concurrency level (fields in :mod:`.results`), SLO
verdicts, reports and tuning sweeps.

Pure functions (stdlib only): used by the ``loadtest_results`` module on the
load-generator host and by the ``loadtest_*`` filters on the controller.

Files: :mod:`.results` (the tools' result files -> levels), :mod:`.slo`
(targets and verdict), :mod:`.report` (Markdown tables, the report),
:mod:`.tuning` (sweeps: best value, table, plot input), :mod:`.api` (the API a
load test drives: endpoint and request function per tool), :mod:`.command`
(the load generator's argv). Every name below is
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
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.api import (  # noqa: F401
    APIS, DEFAULT_ENDPOINTS, load_plan)
from ansible_collections.llmops.serving.plugins.module_utils.loadtest.command import (  # noqa: F401
    evalscope_argv, load_command, prompt_length_bounds, vllm_bench_argv)
