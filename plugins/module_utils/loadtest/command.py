# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The load generator's argv (the verify role's command, without the
``timeout`` prefix and, for ``vllm bench serve``, without the per-level
``--num-prompts/--max-concurrency/--result-filename`` the role appends per
concurrency level).

``settings`` (the role's variables, unprefixed): ``tool``, ``plan`` (from
:func:`.api.load_plan`), ``python``, ``work_dir``, ``vllm_venv``,
``vllm_dist_rc`` (exit code of the `import vllm` probe: 0 = the venv has the
``vllm`` entry point), ``base_url``, ``model``, ``concurrency``, ``requests``,
``remote_dir``, ``request_timeout``, ``connect_timeout``, ``sleep_interval``,
``seed``, ``output_len``, ``input_len``, ``input_len_range_ratio``,
``stream``, ``dataset`` (random / line_by_line), ``tokenizer_path``,
``prompts_file``, ``extra_args``.

Values are turned into strings the way the role's Jinja did (``str()``), so
the argv is byte-identical to the one the role built in Jinja before
(tests/fixtures/verify-argv/).

Pure functions (stdlib only).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math

from ansible_collections.llmops.serving.plugins.module_utils.loadtest.results import LoadTestError


def _int(value):
    """Jinja's ``int`` filter: int, else int(float), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _float(value):
    """Jinja's ``float`` filter: float, else 0.0."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _strs(values):
    return [str(v) for v in values or []]


def prompt_length_bounds(input_len, range_ratio):
    """(min, max) prompt length of the random dataset: input_len * (1 -/+ ratio), floor/ceil, min at least 1."""
    n, r = _int(input_len), _float(range_ratio)
    return max(1, int(math.floor(n * (1 - r)))), int(math.ceil(n * (1 + r)))


def _need(settings, *keys):
    missing = [k for k in keys if k not in settings]
    if missing:
        raise LoadTestError("load-generator command: missing settings %s" % ", ".join(sorted(missing)))


COMMON = ("plan", "python", "work_dir", "base_url", "model", "remote_dir", "seed", "output_len", "input_len",
          "input_len_range_ratio", "dataset", "tokenizer_path", "prompts_file", "extra_args")


def evalscope_argv(s):
    """EvalScope perf through the role's evalscope_perf.py: every concurrency level in one run."""
    _need(s, "concurrency", "requests", "request_timeout", "connect_timeout", "sleep_interval", "stream", *COMMON)
    plan = s["plan"]
    argv = [s["python"], s["work_dir"] + "/bin/evalscope_perf.py",
            "--url", s["base_url"] + plan["endpoint"], "--api", plan["backend"], "--model", s["model"],
            "--parallel"] + _strs(s["concurrency"]) + ["--number"] + _strs(s["requests"])
    argv += ["--outputs-dir", s["remote_dir"] + "/results", "--no-timestamp",
             "--total-timeout", str(s["request_timeout"]), "--read-timeout", str(s["request_timeout"]),
             "--connect-timeout", str(s["connect_timeout"]),
             "--sleep-interval", str(s["sleep_interval"]), "--seed", str(s["seed"]),
             "--max-tokens", str(s["output_len"]),
             "--stream" if s["stream"] else "--no-stream"]
    if plan["ignore_eos"]:
        argv += ["--min-tokens", str(s["output_len"])]
    if s["dataset"] == "random":
        low, high = prompt_length_bounds(s["input_len"], s["input_len_range_ratio"])
        argv += ["--dataset", "random", "--tokenizer-path", s["tokenizer_path"],
                 "--min-prompt-length", str(low), "--max-prompt-length", str(high)]
    else:
        argv += ["--dataset", "line_by_line", "--dataset-path", s["prompts_file"]]
        if len(s["tokenizer_path"]) > 0:
            argv += ["--tokenizer-path", s["tokenizer_path"]]
    return argv + _strs(s["extra_args"])


def vllm_bench_argv(s):
    """``vllm bench serve`` (the venv's entry point, else the role's wrapper; always the wrapper for its own
    request functions), without the per-level arguments."""
    _need(s, "vllm_venv", "vllm_dist_rc", *COMMON)
    plan = s["plan"]
    if s["vllm_dist_rc"] == 0 and not plan["wrapper"]:
        argv = [s["python"], s["vllm_venv"] + "/bin/vllm", "bench", "serve"]
    else:
        argv = [s["python"], s["work_dir"] + "/bin/vllm_bench_serve.py"]
    argv += ["--backend", plan["backend"],
             "--base-url", s["base_url"], "--endpoint", plan["endpoint"], "--model", s["model"],
             "--tokenizer", s["tokenizer_path"], "--request-rate", "inf", "--seed", str(s["seed"]),
             "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
             "--save-result", "--result-dir", s["remote_dir"] + "/results", "--disable-tqdm"]
    if plan["ignore_eos"]:
        argv.append("--ignore-eos")
    if s["dataset"] == "random":
        argv += ["--dataset-name", "random", "--random-input-len", str(s["input_len"]),
                 "--random-output-len", str(s["output_len"]),
                 "--random-range-ratio", json.dumps({"input": _float(s["input_len_range_ratio"]), "output": 0.0})]
    else:
        argv += ["--dataset-name", "custom", "--dataset-path", s["remote_dir"] + "/prompts.jsonl",
                 "--custom-output-len", str(s["output_len"]), "--skip-chat-template"]
    return argv + _strs(s["extra_args"])


BUILDERS = {"evalscope": evalscope_argv, "vllm_bench": vllm_bench_argv}


def load_command(settings):
    """The argv of ``settings['tool']`` (evalscope or vllm_bench)."""
    tool = (settings or {}).get("tool")
    if tool not in BUILDERS:
        raise LoadTestError("verify_tool must be evalscope or vllm_bench, got %r" % (tool,))
    return BUILDERS[tool](settings)
