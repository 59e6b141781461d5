# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Monitoring of the fleet: Prometheus scrape targets (targets), alert rules
(rules) and Grafana dashboards (dashboards), built from the instance view."""
