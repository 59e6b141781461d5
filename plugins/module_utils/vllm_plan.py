# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The change plan of a vLLM host: what a run of the vllm_service role does.

Pure Python, like the instance view. ``plan(view, state, files, settings)``
takes the instance view (``vllm_view``), the host state read before any
change (the ``vllm_host_state`` module's result) and the files the role
would write (path, sha1 of the rendered content, mode, which instance), and
returns what the run does, per instance and in order:

- ``files``: each file with ``write`` (the host does not hold it already:
  ``vllm_host_state.file_same``, the one rule);
- ``changed``: the instances whose unit, command line, environment or venv
  changes on this host; ``restart``: those restarted, spanning instances first
  (a change on any node of one restarts it on every node: ``batch_changed``);
- ``lora_sync``: the active instances that load LoRA adapters at runtime
  (``lora_runtime`` in the view) whose drop-in changes only in its adapter
  list (the drop-in's ``lora_key`` equals the host's: vllm_lora.dropin_key):
  their drop-in is written (a later restart keeps the set) and the adapters
  are loaded and unloaded (module vllm_lora) instead of a restart;
- ``drain``: the restarts taken out of the gateway's rotation first;
- ``snapshot``: the instances whose current files are copied before writing
  (what a rollback restores);
- ``apply``: the units systemd must still enable/start (or stop);
- ``ready``: the instances the readiness gate waits for;
- ``reset_failed``: the units whose start-rate counter is cleared first;
- ``remove``: the instances the inventory no longer lists;
- ``was_active`` / ``served_before``: what the rollback keeps serving;
- ``has_work``: False on a no-op run (the run phase is skipped with one include).

``rollback(plan, snapshot)`` says, after a failed start, what is restored,
restarted, stopped, disabled or left to systemd.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_host_state as hs
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode

# What the settings must say (the role's variables, vars/main.yml _vllm_plan_settings).
SETTINGS = ("service_state", "service_enabled", "pip_changed", "rollback", "check_mode", "readiness_check",
            "readiness_check_unchanged", "drain", "rollback_dir", "venv_link", "venv_path", "venv_versioned")
FILE_KINDS = ("unit", "dropin", "env")
# Unit states that mean "serving or about to": a rollback never leaves such an instance stopped.
SERVING_STATES = ("active", "activating", "reloading", "deactivating")


class PlanError(ValueError):
    """Input the plan cannot be computed from (a bug in the role, not in the inventory)."""


def _unique(names):
    out = []
    for name in names:
        if name not in out:
            out.append(name)
    return out


def _check(view, state, files, settings):
    missing = [k for k in SETTINGS if k not in (settings or {})]
    if missing:
        raise PlanError("the plan's settings lack %s" % ", ".join(missing))
    if settings["service_state"] not in ("started", "stopped"):
        raise PlanError("service_state must be started or stopped, got %r" % settings["service_state"])
    if not isinstance(state, dict) or "units" not in state or "files" not in state:
        raise PlanError("the plan needs the vllm_host_state module's result (units, files)")
    names = [v.get("name") for v in view or []]
    for f in files or []:
        if f.get("kind") not in FILE_KINDS:
            raise PlanError("file %s: kind must be one of %s" % (f.get("path"), ", ".join(FILE_KINDS)))
        if f["kind"] != "unit" and f.get("instance") not in names:
            raise PlanError("file %s names instance %r, which the view does not list" % (f.get("path"),
                                                                                         f.get("instance")))


def _files(files, state):
    """Each file to write with ``write``: the host does not hold it already (file_same, the one rule)."""
    out = []
    for f in files or []:
        st = state["files"].get(f["path"])
        same = hs.file_same(st, f["sha1"], f.get("mode", "0644"), f.get("owner", "root"), f.get("group", "root"))
        entry = dict(f, write=not same)
        if f["kind"] == "env":
            # An env file may hold an API key: its sha1 would let anyone who reads the plan test guesses.
            entry.pop("sha1", None)
        out.append(entry)
    return out


def _unit_state(state, unit):
    return state["units"].get(unit) or {}


def _as_asked(u, settings):
    """The unit is enabled/disabled and active/stopped as the settings ask."""
    enabled = "enabled" if settings["service_enabled"] else "disabled"
    if settings["service_state"] == "started":
        running = u.get("active_state") == "active"
    else:
        running = u.get("active_state") in ("inactive", "failed")
    return u.get("unit_file_state") == enabled and running


def _lora_only(view, state, files, changed):
    """The changed instances whose only change is their LoRA adapter list, and that can take it without a
    restart: lora_runtime, active now, env file unchanged, drop-in key (text without --lora-modules) equal."""
    out = []
    for v in view:
        n = v["name"]
        if n not in changed or not v.get("lora_runtime"):
            continue
        if (_unit_state(state, v["unit"]).get("active_state") != "active"
                or any(f["write"] for f in files if f.get("instance") == n and f["kind"] == "env")):
            continue
        dropin = [f for f in files if f.get("instance") == n and f["kind"] == "dropin"]
        host_key = (state["files"].get(dropin[0]["path"]) or {}).get("lora_key") if dropin else None
        if dropin and dropin[0].get("lora_key") and host_key == dropin[0]["lora_key"]:
            out.append(n)
    return out


def plan(view, state, files, settings, batch_changed=None):
    """The change plan (see the module's docstring). ``batch_changed``: {node: [changed names]}
    of the hosts in this batch, for spanning instances (None: this host alone)."""
    _check(view, state, files, settings)
    view = list(view or [])
    names = [v["name"] for v in view]
    started = settings["service_state"] == "started"
    files = _files(files, state)
    unit_write = any(f["write"] for f in files if f["kind"] == "unit")
    written = _unique(f["instance"] for f in files if f["kind"] != "unit" and f["write"])
    everything = unit_write or bool(settings["pip_changed"])
    changed = list(names) if everything else [n for n in names if n in written]
    lora_sync = [] if everything or not started else _lora_only(view, state, files, changed)
    changed = [n for n in changed if n not in lora_sync]

    snapshot = []
    if settings["rollback"] and not settings["check_mode"] and changed:
        snapshot = list(names) if everything else list(changed)

    restart = []
    if started:
        spanning = vllm_multinode.spanning_restarts(view, batch_changed) if batch_changed else []
        restart = spanning + [n for n in changed if n not in spanning]
    serves_http = dict((v["name"], v.get("serves_http", True)) for v in view)
    drain = [n for n in restart if serves_http[n]] if settings["drain"] else []

    units = dict((v["name"], _unit_state(state, v["unit"])) for v in view)
    apply = [v["unit"] for v in view if not _as_asked(units[v["name"]], settings)]
    ready = []
    if settings["readiness_check"] and started:
        ready = [v["name"] for v in view if serves_http[v["name"]]
                 and (settings["readiness_check_unchanged"] or v["unit"] in apply or v["name"] in restart)]
    reset_failed = []
    if started:
        failed = [n for n in names if units[n].get("active_state") == "failed"]
        reset_failed = [dict((v["name"], v["unit"]) for v in view)[n] for n in _unique(restart + failed)]

    was_active = [n for n in names if units[n].get("active_state") == "active"]
    served_before = [n for n in names if units[n].get("unit_file_state") == "enabled"
                     or units[n].get("active_state") in SERVING_STATES]
    snapshot_on_host = bool((state["files"].get(settings["rollback_dir"]) or {}).get("exists"))
    link = (state["files"].get(settings["venv_link"]) or {}).get("lnk_source", "")
    venv_link_stale = bool(settings["venv_versioned"] and started and link != settings["venv_path"])
    remove = list(state.get("stale_instances") or [])
    # A snapshot on the host (an earlier run's, or the one this run takes) is dropped by the run phase.
    snapshot_left = snapshot_on_host or bool(snapshot)
    has_work = bool(restart or apply or ready or snapshot_left or venv_link_stale or remove or lora_sync)
    return {
        "instances": names,
        "units": dict((v["name"], v["unit"]) for v in view),
        "files": files,
        "write": {"unit": unit_write,
                  "dropin": [f["instance"] for f in files if f["kind"] == "dropin" and f["write"]],
                  "env": [f["instance"] for f in files if f["kind"] == "env" and f["write"]]},
        "changed": changed,
        "restart": restart,
        "lora_sync": lora_sync,
        "drain": drain,
        "snapshot": snapshot,
        "apply": apply,
        "ready": ready,
        "reset_failed": reset_failed,
        "remove": remove,
        "was_active": was_active,
        "served_before": served_before,
        "snapshot_left": snapshot_left,
        "venv_link_stale": venv_link_stale,
        "has_work": has_work,
    }


def rollback(the_plan, snapshot):
    """After a failed start: what the rescue does with each instance this run touched.

    touched = restarted for a change, or not active before the run. Restorable =
    touched and deployed before (the snapshot holds its drop-in): its old files
    come back, and if it served before its old config is started and verified.
    Touched, nothing to restore, served before: left enabled and running under
    systemd's Restart= (never stopped or disabled). Touched, nothing to restore,
    never served (a first deployment): stopped and disabled, files kept.
    """
    snapshot = snapshot or {}
    touched = _unique(list(the_plan["restart"]) + [n for n in the_plan["instances"] if n not in the_plan["was_active"]])
    kept = snapshot.get("instances") or []
    restorable = [n for n in touched if n in kept]
    served = the_plan["served_before"]
    left_running = [n for n in touched if n not in restorable and n in served]
    first_deployed = [n for n in touched if n not in restorable and n not in served]
    return {
        "touched": touched,
        "restorable": restorable,
        "restore_unit": bool(the_plan["write"]["unit"] and snapshot.get("unit")),
        "restore_env": [n for n in restorable if n in (snapshot.get("env") or [])],
        "restart_old": [n for n in restorable if n in _unique(the_plan["was_active"] + served)],
        "left_running": left_running,
        "first_deployed": first_deployed,
        "stop": [n for n in touched if n not in left_running],
    }


def summary(the_plan, ready=None):
    """What a run did by its plan, for the play's report: the files written,
    the instances restarted (and drained first), started or stopped, removed,
    the state the readiness gate found for each one it waited for, and the
    instances serving now."""
    ready = ready or {}
    units = dict((u, n) for n, u in the_plan["units"].items())
    return {
        "changed": bool(the_plan["has_work"] or any(f["write"] for f in the_plan["files"])),
        "written": [f["path"] for f in the_plan["files"] if f["write"]],
        "restarted": list(the_plan["restart"]),
        "lora_synced": list(the_plan.get("lora_sync") or []),
        "drained": list(the_plan["drain"]),
        "started_or_stopped": [units.get(u, u) for u in the_plan["apply"]],
        "removed": list(the_plan["remove"]),
        "ready": dict((n, (ready.get(n) or {}).get("state", "not probed")) for n in the_plan["ready"]),
        # Serving now: ready in this run, or active before it and not restarted (the compile cache collects from these).
        "serving": [n for n in the_plan["instances"] if (ready.get(n) or {}).get("state") == "ready"
                    or (n in the_plan["was_active"] and n not in the_plan["restart"])],
    }
