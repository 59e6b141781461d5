# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The role-wide settings vllm_service refuses before any change (its preflight).

``preflight_problems(settings)`` returns one message per problem, each naming the
variable and the fix; the role fails with all of them at once (joined by
`` || ``) before the host is read or anything changes. The per-instance rules
live in the view (:mod:`.checks`); these are the settings of the role itself
plus what the view and the gateway agent already found (``device_problems``,
``agent_problems``), so that one task fails with everything.

``settings`` keys: host, engine_ready_timeout, start_timeout_margin,
watchdog (bool) and its numbers (watchdog_interval, watchdog_failures,
watchdog_max_restarts_per_hour, watchdog_probe_timeout,
watchdog_revive_max_per_hour, watchdog_revive_backoff,
watchdog_revive_backoff_max), inherit_packages (bool), python, venvs_dir,
venv, device (the derived one), configured_device, agent_problems (list),
view (the instance view: its device_problems), shutdown_flags (the variables
that set shutdown_timeout in args).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import int_or_none

DEVICES = ("cuda", "cpu")
# In the order the message names them.
WATCHDOG_NUMBERS = ("watchdog_interval", "watchdog_failures", "watchdog_probe_timeout", "watchdog_max_restarts_per_hour",
                    "watchdog_revive_max_per_hour", "watchdog_revive_backoff", "watchdog_revive_backoff_max")


def _timeouts(s):
    ready, margin = int_or_none(s.get("engine_ready_timeout")), int_or_none(s.get("start_timeout_margin"))
    if ready is None or margin is None or ready <= 0 or margin < 30:
        return ["vllm_engine_ready_timeout must be > 0 and vllm_start_timeout_margin >= 30 s "
                "(TimeoutStartSec = engine-ready timeout + margin)."]
    return []


def _watchdog(s):
    if not s.get("watchdog"):
        return []
    n = dict((k, int_or_none(s.get(k))) for k in WATCHDOG_NUMBERS)
    ok = (None not in n.values() and n["watchdog_interval"] >= 5 and n["watchdog_failures"] >= 1
          and n["watchdog_max_restarts_per_hour"] >= 0 and n["watchdog_probe_timeout"] >= 1
          and n["watchdog_revive_max_per_hour"] >= 0 and n["watchdog_revive_backoff"] >= 0
          and n["watchdog_revive_backoff_max"] >= n["watchdog_revive_backoff"])
    if ok:
        return []
    got = ", ".join(str(s.get(k)) for k in WATCHDOG_NUMBERS)
    return ["vllm_watchdog_interval must be >= 5 s, vllm_watchdog_failures >= 1, vllm_watchdog_probe_timeout >= 1 s, "
            "vllm_watchdog_max_restarts_per_hour, vllm_watchdog_revive_max_per_hour and vllm_watchdog_revive_backoff >= 0, "
            "and vllm_watchdog_revive_backoff_max >= vllm_watchdog_revive_backoff (got %s)." % got]


def _inherit(s):
    python = str(s.get("python") or "")
    managed = [str(d).rstrip("/") + "/" for d in (s.get("venvs_dir"), s.get("venv")) if d]
    if s.get("inherit_packages") and any(python.startswith(d) for d in managed):
        return ["vllm_venv_inherit_packages is true and vllm_python (%s) is in a venv this role manages (%s, pruned "
                "after each switch): point vllm_python at the image's own interpreter (e.g. /opt/torch/.venv/bin/python3 "
                "or /usr/bin/python3). Nothing was changed." % (python, s.get("venvs_dir"))]
    return []


def _device(s):
    if s.get("device") not in DEVICES:
        return ["vllm_device must be auto, cuda or cpu (got %s)." % s.get("configured_device")]
    return []


def _shutdown(s):
    flags = list(s.get("shutdown_flags") or [])
    if not flags:
        return []
    return ["%s on %s set shutdown_timeout: set vllm_shutdown_timeout instead (it renders --shutdown-timeout and sizes "
            "the unit's TimeoutStopSec). Nothing was changed." % (", ".join(flags), s.get("host"))]


def preflight_problems(settings):
    """Every problem of the role's settings, in the order the role used to check them (empty: none)."""
    s = settings or {}
    device_problems = [p for v in s.get("view") or [] for p in v.get("device_problems") or []]
    return (_timeouts(s) + _watchdog(s) + _inherit(s) + _device(s) + list(s.get("agent_problems") or [])
            + device_problems + _shutdown(s))
