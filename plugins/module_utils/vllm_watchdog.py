#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Health watchdog of one vLLM instance: one round per run of
``vllm-watchdog@NAME.service`` (started by ``vllm-watchdog@NAME.timer``).

A round reads the unit, and when it is ``active`` runs the readiness probe
of :mod:`vllm_client` (``/health``, then a tiny real completion; the API key
comes from an environment variable that systemd fills from the instance's
root-only env file, never from argv). ``degraded`` (``/health`` 200 but the
completion fails, or a probe times out: a hung engine) and ``dead`` count as
failures; a completion that times out while the engine's step and token
counters in ``/metrics`` move is a busy engine (``busy``), not a failure. After ``failures`` in a row it sends SIGKILL to the instance's
processes (``systemctl kill``): the unit's ``Restart=`` brings it back, the
restart is counted in ``NRestarts`` and bounded by ``StartLimitBurst``. At
most ``max_restarts_per_hour`` such restarts in any hour; past that the
instance is left alone and the state says ``rate-limited``.

A unit systemd gave up on (``failed``: its engine died ``StartLimitBurst``
times in ``StartLimitIntervalSec``, e.g. a client whose first request kills
every fresh engine) is revived: ``systemctl reset-failed`` and a start, at
the first round that sees it failed, then with a growing back-off (``backoff``
seconds after the first revival of the hour, doubled each time, at most
``backoff_max``), at most ``revive_max_per_hour`` times in any hour; past that
it is left failed and the state says ``gave-up`` (an alert). The cause (the
journal's fatal line of the last failed start, :mod:`vllm_journal`) is kept in
the state and named in each line. Every decision is one line on stdout (the
journal, identifier ``vllm-watchdog-NAME``).

The state (JSON, no secrets) is kept in ``STATE_DIR/NAME.json``; the
``vllm_health`` module returns it (:func:`read_state`, :func:`summary`).

Runs standalone on the host (the role installs it with ``vllm_client.py``
beside it), with the vLLM venv's python (it needs ``requests``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import sys
import time

try:
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_client
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_journal
except ImportError:  # standalone on the host: vllm_client.py and vllm_journal.py lie beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vllm_client  # noqa: E402  pylint: disable=import-error
    import vllm_journal  # noqa: E402  pylint: disable=import-error

STATE_DIR = "/var/lib/vllm-watchdog"
HOUR_S = 3600
FAILING_STATES = ("degraded", "dead")
# The engine's progress counters in /metrics (one step, one token): they move while the engine works, whatever the
# load. A readiness completion that times out while they move is a busy engine; while they stand still, a hung one.
PROGRESS_METRICS = ("vllm:iteration_tokens_total_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def progress(metrics_probe):
    """The sum of the progress counters of a ``GET /metrics`` probe; None when it failed or has none of them
    (``--disable-log-stats``): then a timeout cannot be told apart from a hang and counts as a failure."""
    if not metrics_probe or not metrics_probe.get("ok"):
        return None
    total, seen = 0.0, False
    for line in (metrics_probe.get("text") or "").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in PROGRESS_METRICS:
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return total if seen else None


def busy_not_hung(readiness, before, after):
    """The readiness completion timed out but the engine made progress meanwhile (the counters moved)."""
    return bool(readiness and readiness.get("error_kind") == "timeout" and before is not None
                and after is not None and after > before)


def state_path(instance, state_dir=STATE_DIR):
    return os.path.join(state_dir, "%s.json" % instance)


def read_state(path):
    """The state file as a dict, or None when absent or unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(path, state):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def new_state(instance, failures, max_per_hour):
    return {"instance": instance, "unit": "vllm@%s.service" % instance, "status": "unknown",
            "consecutive_failures": 0, "failures_threshold": failures, "max_restarts_per_hour": max_per_hour,
            "restarts": [], "restarts_total": 0, "last_restart": None, "last_restart_reason": None,
            "last_check": None, "last_probe_state": None, "last_reason": None, "checks": 0,
            "revivals": [], "revivals_total": 0, "last_revival": None, "next_revival": None,
            "max_revivals_per_hour": None, "last_failure_cause": None}


class Revive(object):
    """The revival rule's settings: at most ``max_per_hour`` revivals in any hour, the first at once, the
    next ``backoff`` seconds after the one before, doubled each time, at most ``backoff_max``."""

    def __init__(self, max_per_hour=6, backoff=30, backoff_max=600):
        self.max_per_hour, self.backoff, self.backoff_max = max_per_hour, backoff, backoff_max

    def delay(self, done):
        """Seconds between the last revival and the next, ``done`` revivals in the last hour."""
        return 0 if done <= 0 else min(self.backoff_max, self.backoff * 2 ** (done - 1))


def revive_decision(state, now, revive, cause=None):
    """The rule for a unit systemd gave up on (``failed``): ``revive``, ``backing-off`` or ``gave-up``.
    Updates ``state`` (pure, no I/O)."""
    state["revivals"] = [t for t in state.get("revivals") or [] if now - t < HOUR_S]
    state.update(consecutive_failures=0, max_revivals_per_hour=revive.max_per_hour,
                 last_failure_cause=cause or state.get("last_failure_cause"))
    done = len(state["revivals"])
    if done >= revive.max_per_hour:
        # Left failed; the budget comes back an hour after the oldest revival of the window.
        state.update(status="gave-up", next_revival=(min(state["revivals"]) + HOUR_S) if state["revivals"] else None)
        return "gave-up"
    due = (max(state["revivals"]) + revive.delay(done)) if state["revivals"] else now
    if now < due:
        state.update(status="backing-off", next_revival=due)
        return "backing-off"
    state["revivals"].append(now)
    state.update(status="revived", last_revival=now, next_revival=None,
                 revivals_total=int(state.get("revivals_total") or 0) + 1)
    return "revive"


def decide(state, probe_state, reason, unit_active, now, failures, max_per_hour, unit_failed=False, revive=None,
           cause=None):
    """Update ``state`` with one round's outcome and return the action:
    ``restart``, ``rate-limited``, ``revive``, ``backing-off``, ``gave-up`` or None. Pure (no I/O): the
    rule itself.

    ``probe_state``: :func:`vllm_client.combine_state`'s state;
    ``unit_active``: the unit's ActiveState is ``active``. Only an active
    unit is judged (a starting or restarting one is systemd's business);
    ``unit_failed``: ActiveState ``failed`` (systemd gave up on it): revived by
    :func:`revive_decision` with ``revive`` (a :class:`Revive`; None: never)."""
    state.update(last_check=now, last_probe_state=probe_state, last_reason=reason,
                 checks=int(state.get("checks") or 0) + 1, failures_threshold=failures,
                 max_restarts_per_hour=max_per_hour)
    state["restarts"] = [t for t in state.get("restarts") or [] if now - t < HOUR_S]
    if unit_failed and revive is not None and revive.max_per_hour > 0:
        return revive_decision(state, now, revive, cause)
    if not unit_active:
        state.update(status="waiting", consecutive_failures=0)
        return None
    if probe_state not in FAILING_STATES:
        state.update(status={"ready": "ok", "busy": "busy", "asleep": "asleep"}.get(probe_state, "waiting"),
                     consecutive_failures=0)
        return None
    state["consecutive_failures"] = int(state.get("consecutive_failures") or 0) + 1
    if state["consecutive_failures"] < failures:
        state["status"] = "failing"
        return None
    if len(state["restarts"]) >= max_per_hour:
        state["status"] = "rate-limited"
        return "rate-limited"
    state["restarts"].append(now)
    state.update(status="restarted", consecutive_failures=0, last_restart=now, last_restart_reason=reason,
                 restarts_total=int(state.get("restarts_total") or 0) + 1)
    return "restart"


def summary(state, now=None):
    """The part of a state file that vllm_health returns (``watchdog``)."""
    if not state:
        return {"present": False, "status": None, "consecutive_failures": None, "failures_threshold": None,
                "restarts_last_hour": None, "max_restarts_per_hour": None, "restarts_total": None,
                "last_restart": None, "last_restart_reason": None, "last_check": None, "last_reason": None,
                "revivals_last_hour": None, "max_revivals_per_hour": None, "revivals_total": None,
                "last_revival": None, "next_revival": None, "last_failure_cause": None}
    now = time.time() if now is None else now
    return {"present": True, "status": state.get("status"),
            "consecutive_failures": state.get("consecutive_failures"),
            "failures_threshold": state.get("failures_threshold"),
            "restarts_last_hour": len([t for t in state.get("restarts") or [] if now - t < HOUR_S]),
            "max_restarts_per_hour": state.get("max_restarts_per_hour"),
            "restarts_total": state.get("restarts_total"), "last_restart": _iso(state.get("last_restart")),
            "last_restart_reason": state.get("last_restart_reason"), "last_check": _iso(state.get("last_check")),
            "last_reason": state.get("last_reason"),
            "revivals_last_hour": len([t for t in state.get("revivals") or [] if now - t < HOUR_S]),
            "max_revivals_per_hour": state.get("max_revivals_per_hour"),
            "revivals_total": state.get("revivals_total") or 0, "last_revival": _iso(state.get("last_revival")),
            "next_revival": _iso(state.get("next_revival")), "last_failure_cause": state.get("last_failure_cause")}


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)) if epoch else None


def run_round(args, api_key, runner=vllm_client._run, now=None):
    """One watchdog round. Returns ``(state, action, message)``."""
    unit = "vllm@%s.service" % args.instance
    path = state_path(args.instance, args.state_dir)
    state = read_state(path) or new_state(args.instance, args.failures, args.max_restarts_per_hour)
    u = vllm_client.unit_state(unit, runner=runner)
    active = u.get("active_state") == "active"
    failed = u.get("active_state") == "failed"
    probe_state, reason = "skipped", "unit %s is %s/%s" % (unit, u.get("active_state"), u.get("sub_state"))
    cause = None
    if active:
        client = vllm_client.VllmClient(args.url, api_key=api_key, timeout=args.timeout)
        health = client.health()
        metrics = client.metrics() if health["ok"] else None
        before = progress(metrics)
        # Put to sleep (sleep mode, module vllm_sleep): its requests wait until it is woken; not a hang.
        asleep = vllm_client.sleep_state((metrics or {}).get("text")).get("awake") == 0
        readiness = (client.completion(args.model, max_tokens=1, timeout=args.timeout)
                     if health["ok"] and not asleep else None)
        probe_state, reason = vllm_client.combine_state(health, readiness, u)
        if asleep:
            probe_state, reason = "asleep", "the engine sleeps (vllm:engine_sleep_state awake=0): not probed"
        if probe_state == "degraded" and readiness and readiness.get("error_kind") == "timeout":
            after = progress(client.metrics())
            if busy_not_hung(readiness, before, after):
                probe_state, reason = "busy", (
                    "the readiness completion timed out after %ss but the engine made progress meanwhile (%d steps "
                    "and tokens): busy, not hung" % (args.timeout, after - before))
            else:
                reason += "; the engine made no progress meanwhile (%s): hung" % (
                    "its step and token counters stood still" if after is not None else "/metrics has no counters")
    elif failed:
        probe_state, reason = "dead", "systemd gave up on %s (result %s)" % (unit, u.get("result"))
        cause = vllm_journal.excerpt(vllm_client.journal_text(unit, lines=3000, runner=runner))["cause"]
    now = time.time() if now is None else now
    revive = Revive(args.revive_max_per_hour, args.revive_backoff, args.revive_backoff_max)
    action = decide(state, probe_state, reason, active, now, args.failures, args.max_restarts_per_hour,
                    unit_failed=failed, revive=revive, cause=cause)
    msg = "%s: %s (%s); failures in a row %d/%d, restarts in the last hour %d/%d" % (
        unit, probe_state, reason, state["consecutive_failures"], args.failures, len(state["restarts"]),
        args.max_restarts_per_hour)
    attempts = "%d/%d revivals in the last hour" % (len(state.get("revivals") or []), revive.max_per_hour)
    because = "; cause: %s" % (state.get("last_failure_cause") or "not in the journal")
    if action == "revive":
        rc1, dummy, err1 = runner(["systemctl", "reset-failed", unit])
        rc2, dummy, err2 = runner(["systemctl", "start", "--no-block", unit])
        errors = " ".join(e.strip() for rc, e in ((rc1, err1), (rc2, err2)) if rc)
        msg = "REVIVE %s: %s; reset-failed and started (%s)%s%s" % (
            unit, reason, attempts, because, (" (systemctl: %s)" % errors) if errors else "")
    elif action == "backing-off":
        msg = "FAILED %s: %s; next revival in %d s (back-off; %s)%s" % (
            unit, reason, max(0, int(state["next_revival"] - now)), attempts, because)
    elif action == "gave-up":
        msg = "GIVE-UP %s: %s; %s: left failed%s%s" % (
            unit, reason, attempts,
            " until %s" % _iso(state["next_revival"]) if state.get("next_revival") else "", because)
    elif action == "restart":
        rc, out, err = runner(["systemctl", "kill", "--signal=SIGKILL", unit])
        msg = "RESTART %s after %d failed readiness rounds in a row (%s): SIGKILL, systemd's Restart= brings it " \
              "back (rc=%s%s)" % (unit, args.failures, reason, rc, (" " + err.strip()) if rc else "")
    elif action == "rate-limited":
        msg = "RATE-LIMITED %s: failing (%s) but already restarted %d times in the last hour (max %d): left as " \
              "it is" % (unit, reason, len(state["restarts"]), args.max_restarts_per_hour)
    write_state(path, state)
    return state, action, msg


def build_parser():
    p = argparse.ArgumentParser(prog="vllm_watchdog.py",
                                description="One health-watchdog round for vllm@INSTANCE (see the module doc).")
    p.add_argument("--instance", required=True)
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="served model name for the readiness completion")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    p.add_argument("--failures", type=int, default=2, help="failed rounds in a row before a restart")
    p.add_argument("--max-restarts-per-hour", type=int, default=3)
    p.add_argument("--timeout", type=float, default=10.0, help="timeout of each probe, seconds")
    p.add_argument("--revive-max-per-hour", type=int, default=6,
                   help="revivals of a unit systemd gave up on, in any hour (0: never revive)")
    p.add_argument("--revive-backoff", type=float, default=30.0,
                   help="seconds between the first and the second revival of an hour, doubled for each next")
    p.add_argument("--revive-backoff-max", type=float, default=600.0, help="the longest back-off, seconds")
    p.add_argument("--state-dir", default=STATE_DIR)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.failures < 1 or args.max_restarts_per_hour < 0 or args.revive_max_per_hour < 0 \
            or args.revive_backoff < 0 or args.revive_backoff_max < 0:
        sys.stderr.write("vllm_watchdog: --failures must be >= 1; --max-restarts-per-hour, --revive-max-per-hour, "
                         "--revive-backoff and --revive-backoff-max >= 0\n")
        return 2
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    dummy, action, msg = run_round(args, api_key)
    sys.stdout.write("vllm_watchdog: %s\n" % msg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
