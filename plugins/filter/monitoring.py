# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the monitoring role: file_sd targets, alert rules, dashboards."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils.monitoring import dashboards, rules, targets


def monitoring_targets(hostvars, settings):
    """{job: [file_sd target group]} for every host of settings.fleet_groups."""
    try:
        groups = settings["groups"]
        records = [targets.host_record(h, hostvars[h], settings)
                   for h in targets.fleet_hosts(groups, settings["fleet_groups"])]
        return targets.build_targets(records)
    except targets.TargetError as e:
        raise AnsibleFilterError("monitoring_targets: %s" % e)


def monitoring_rules_yaml(settings):
    try:
        data = rules.build_rules(settings)
    except rules.RuleError as e:
        raise AnsibleFilterError("monitoring_rules_yaml: %s (monitoring_alert_thresholds)" % e)
    text = yaml.safe_dump(data, sort_keys=False, width=1000, default_flow_style=False)
    return "# Managed by llmops.serving.monitoring\n" + text


def monitoring_dashboards(settings):
    """{file name: JSON text} of the Grafana dashboards."""
    return dict((name, dashboards.dashboard_json(d)) for name, d in dashboards.build_dashboards(settings).items())


def monitoring_probe_config(view):
    return targets.probe_config(view)


class FilterModule(object):
    def filters(self):
        return {
            "monitoring_targets": monitoring_targets,
            "monitoring_rules_yaml": monitoring_rules_yaml,
            "monitoring_dashboards": monitoring_dashboards,
            "monitoring_probe_config": monitoring_probe_config,
        }
