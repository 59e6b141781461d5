# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The usage report's rows and table (playbooks/usage.yml), on a real capture of the gateway's counters
(Debian's HAProxy 2.6.12 serving roles/gateway/files/usage.lua: tests/fixtures/haproxy-2.6-usage)."""
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import gateway_usage as gu

CAPTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "haproxy-2.6-usage", "metrics.txt")


def test_rows_from_the_gateways_counters_sum_over_gateways():
    text = open(CAPTURE).read()
    one = gu.rows_from_expositions([text])
    assert one == [{"key": "team-a", "model": "tiny", "requests": 2, "prompt": 16, "completion": 10}]
    # Two gateways (one as the uri module's result), a skipped host: summed, the skipped one ignored.
    two = gu.rows_from_expositions([text, {"content": text}, {"skipped": True}])
    assert two == [{"key": "team-a", "model": "tiny", "requests": 4, "prompt": 32, "completion": 20}]


def test_rows_from_prometheus_results_of_the_uri_loop():
    # The shape of Prometheus' /api/v1/query (resultType vector), one uri result per column.
    def res(item, samples):
        return {"item": item, "json": {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"key": k, "model": m}, "value": [1764806400.0, v]} for k, m, v in samples]}}}
    rows = gu.rows_from_prometheus([res("requests", [("b", "tiny", "3"), ("a", "tiny", "1.9999")]),
                                    res("prompt", [("b", "tiny", "30")]), res("completion", [])])
    assert rows == [{"key": "a", "model": "tiny", "requests": 2, "prompt": 0, "completion": 0},
                    {"key": "b", "model": "tiny", "requests": 3, "prompt": 30, "completion": 0}]


def test_table_has_a_line_per_key_and_model_and_totals():
    lines = gu.table([{"key": "team-a", "model": "tiny", "requests": 2, "prompt": 16, "completion": 10},
                      {"key": "b", "model": "chat", "requests": 10, "prompt": 1000, "completion": 250}], "Usage")
    head = ["key", "model", "requests", "prompt", "tokens", "completion", "tokens", "total", "tokens"]
    assert lines[0] == "Usage" and lines[1].split() == head
    assert lines[3].split() == ["team-a", "tiny", "2", "16", "10", "26"]
    assert lines[-1].split() == ["total", "12", "1016", "260", "1276"]
    assert len(set(len(line) for line in lines[1:3])) == 1  # header and rule line up
    assert "(no usage counted)" in gu.table([], "Usage")


@pytest.mark.parametrize("period", ["24h", "7d", "90m"])
def test_query_over_a_period(period):
    assert gu.prometheus_query("prompt", period) == (
        'sum by (key, model) (increase(llmops_gateway_prompt_tokens_total{job="gateway"}[%s]))' % period)


def test_a_bad_period_names_the_variable():
    with pytest.raises(ValueError, match="usage_period must be a Prometheus duration"):
        gu.prometheus_query("prompt", "yesterday")
