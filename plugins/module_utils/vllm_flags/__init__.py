# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Check vLLM options given as data before any unit changes.

Three layers, cheapest first, one file each:

1. :mod:`.fictional` (``check_fictional``): options and environment variables
   that do not exist (any more) in vLLM 0.32 - from the user seeds and older
   tutorials - each rejected with the real replacement named, plus option keys
   given as raw flag strings; the tables and the per-device advice are in
   :mod:`.knobs`.
2. :mod:`.ranges` (``check_ranges``): gpu_memory_utilization in (0, 1], the
   GPUs an instance needs on this node (``gpus_per_node``: TP x PP x DP, or
   TP x PP / nodes for an instance that spans hosts) <= GPUs assigned,
   kv_cache_dtype choices, ports; :mod:`.ports`
   (``check_ports``) for sockets already bound by another process.
3. :mod:`.parser` (``PARSER_CHILD``): a script run by the vLLM venv's Python
   that builds the installed vLLM's own server argument parser (no engine, no
   model load) and parses every instance's argv; ``map_parser_error`` maps its
   messages back to the variable that produced the option.

:mod:`.options` has what they share: the problem dict, variable paths, the
merged option lookup. Every name is importable from this package
(``from ...module_utils import vllm_flags; vllm_flags.check_ranges(...)``).

Who does what: ``vllm_args.py`` renders options into argv and quotes it for
systemd; this package validates options; ``vllm_instance/`` composes both
into the instance view (and runs ``check_fictional``/``check_ranges`` on the
controller, before any host is touched).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.knobs import (  # noqa: F401
    COMMON_ARGS_VAR, COMMON_ENV_VAR, DEFAULT_GPU_MEMORY_UTILIZATION, FICTIONAL_ENV, FICTIONAL_ENV_CPU,
    FICTIONAL_OPTIONS, FICTIONAL_OPTIONS_CPU, INSTANCES_VAR, KV_CACHE_DTYPES, RESERVED_OPTIONS)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import (  # noqa: F401
    as_int, format_problems, inst_path, int_or_none, lookup, merged_options, normalize_key, option_source, problem)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.fictional import (  # noqa: F401
    check_fictional, checked_elsewhere)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.ranges import check_ranges, gpus_per_node, spans  # noqa: F401
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.ports import (  # noqa: F401
    addresses_overlap, check_ports, parse_ss_listeners, unit_of_pid)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.parser import (  # noqa: F401
    PARSER_CHILD, RESULT_MARKER, flag_map, map_parser_error, parse_child_output, parser_argv,
    parser_child_env, parser_problems)
