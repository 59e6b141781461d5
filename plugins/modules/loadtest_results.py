#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: loadtest_results
short_description: Parse EvalScope / vllm bench results and check them against SLOs
version_added: "0.1.0"
description:
  - Reads the result files of a load test on the host where they were written
    and returns one normalized record per concurrency level, the same shape
    for both load generators.
  - C(evalscope) (EvalScope 1.14.1 C(evalscope perf)) - every
    C(parallel_<P>_number_<N>/) folder below O(path), at any depth, with its
    C(benchmark_summary.json) and C(benchmark_percentile.json). A level folder
    without a summary (EvalScope leaves one when the server is unreachable)
    counts as all requests failed.
  - C(vllm_bench) (vLLM 0.32 C(vllm bench serve --save-result)) - every C(*.json)
    directly in O(path) that is a result file (one per concurrency level).
  - Evaluates the SLO targets in O(slo). A level with no successful request,
    or no result at all, always fails the verdict.
  - Read-only. Never changes anything, runs in check mode.
options:
  tool:
    description: Which load generator wrote the files.
    type: str
    required: true
    choices: [evalscope, vllm_bench]
  path:
    description: Folder holding the results (EvalScope's C(--outputs-dir), vllm bench's C(--result-dir)).
    type: path
    required: true
  slo:
    description:
      - SLO targets. Unset (null) keys are not checked. Latencies in milliseconds.
      - C(max_failed) - most failed requests allowed per level (C(0) = none).
      - C(p99_ttft_ms), C(p99_tpot_ms), C(p99_itl_ms), C(p99_e2el_ms) - highest allowed p99.
      - C(min_output_throughput) - lowest allowed output tokens/s per level.
    type: dict
    default: {}
  fail_on_slo:
    description: Fail the task when the verdict is not OK; C(msg) holds the measured-vs-target table.
    type: bool
    default: false
  meta:
    description: Facts printed at the top of RV(summary_markdown) (host, tool, traffic, ...).
    type: dict
    default: {}
author:
  - llmops.serving contributors (!UNKNOWN)
notes:
  - The same parsing code backs the C(llmops.serving.loadtest_*) filters on the controller.
seealso:
  - name: EvalScope perf arguments
    description: evalscope perf command-line reference
    link: https://evalscope.readthedocs.io/en/latest/user_guides/stress_test/parameters.html
"""

EXAMPLES = r"""
- name: Parse vllm bench results and fail on a p99 TTFT above 500 ms
  llmops.serving.loadtest_results:
    tool: vllm_bench
    path: /var/lib/llmops/verify/2026-11-30T001500/results
    slo:
      max_failed: 0
      p99_ttft_ms: 500
      min_output_throughput: 100
    fail_on_slo: true

- name: Parse EvalScope output and keep the verdict as data
  llmops.serving.loadtest_results:
    tool: evalscope
    path: /var/lib/llmops/verify/run/evalscope
    slo: {p99_tpot_ms: 50}
  register: lt

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ lt.slo.table }}"
"""

RETURN = r"""
found:
  description: Whether O(path) exists and at least one level was found.
  returned: always
  type: bool
levels:
  description: One record per concurrency level, sorted by concurrency.
  returned: always
  type: list
  elements: dict
  sample:
    - tool: evalscope
      concurrency: 4
      requests: 16
      completed: 16
      failed: 0
      duration_s: 0.7586
      request_throughput: 21.0929
      output_throughput: 337.4857
      total_token_throughput: 1251.0702
      ttft_mean_ms: 42.29
      ttft_p50_ms: 47.5989
      ttft_p99_ms: 61.5598
      tpot_mean_ms: 9.73
      tpot_p99_ms: 13.2044
      itl_mean_ms: 8.97
      itl_p99_ms: 18.0567
      e2el_mean_ms: 188.2
      e2el_p99_ms: 198.1
      source: /var/lib/llmops/verify/run/evalscope/tiny/parallel_4_number_16/benchmark_summary.json
slo:
  description: The verdict.
  returned: always
  type: dict
  contains:
    ok:
      description: All rows passed.
      type: bool
    rows:
      description: C(concurrency), C(metric), C(measured), C(target), C(ok), C(unit) per checked figure.
      type: list
      elements: dict
    table:
      description: The rows as a markdown table.
      type: str
    targets:
      description: The targets that were checked.
      type: dict
summary_markdown:
  description: A markdown report (meta, per-level table, SLO table).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.loadtest import (
    TOOLS,
    LoadTestError,
    evaluate_slo,
    load_results,
    render_summary,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            tool=dict(type="str", required=True, choices=list(TOOLS)),
            path=dict(type="path", required=True),
            slo=dict(type="dict", default={}),
            fail_on_slo=dict(type="bool", default=False),
            meta=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        levels = load_results(p["tool"], p["path"])
        verdict = evaluate_slo(levels, p["slo"])
    except LoadTestError as e:
        module.fail_json(msg="loadtest_results: %s" % e, changed=False)
    summary = render_summary(levels, verdict, p["meta"])
    result = dict(changed=False, found=bool(levels), levels=levels, slo=verdict, summary_markdown=summary)
    if p["fail_on_slo"] and not verdict["ok"]:
        module.fail_json(msg="SLO not met (%s, %s):\n%s" % (p["tool"], p["path"], verdict["table"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
