# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters of playbooks/usage.yml: token usage rows per key name and model, and their table."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import gateway_usage


def gateway_usage_rows(source, kind="expositions"):
    """kind expositions: a list of the gateways' /metrics texts; kind prometheus: {field: data.result}."""
    if kind == "expositions":
        return gateway_usage.rows_from_expositions(source)
    if kind == "prometheus":
        return gateway_usage.rows_from_prometheus(source)
    raise AnsibleFilterError("gateway_usage_rows: kind must be expositions or prometheus, got %r" % (kind,))


def gateway_usage_query(field, period):
    try:
        return gateway_usage.prometheus_query(field, period)
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError(str(exc))


def gateway_usage_table(rows, title):
    return gateway_usage.table(rows, title)


class FilterModule(object):
    def filters(self):
        return {
            "gateway_usage_rows": gateway_usage_rows,
            "gateway_usage_query": gateway_usage_query,
            "gateway_usage_table": gateway_usage_table,
        }
