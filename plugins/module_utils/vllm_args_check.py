# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The vLLM options and models check of module vllm_args_check, as a class.

Two modules run it: ``vllm_args_check`` (on its own, and after an install
with ``require_parser``) and ``vllm_host_state`` (option ``args_check``: the
role's preflight check and its host read in one module run). ``ARGS_CHECK_SPEC``
is the argument spec both validate the options with.

With ``view`` (the instance view of these instances, as the role passes it)
the checks take each instance as it runs: the range checks its options with
the ones the role adds to a spanning instance (the entry's ``multinode_args``)
and its GPUs on this node (the entry's ``gpus_per_node``), the parser its
argv (the entry's ``argv``: ``--nnodes``/``--node-rank``/... included).
Without a view, the instances as given (argv rendered from them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import json
import os

from ansible_collections.llmops.serving.plugins.module_utils import systemd
from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_instance
from ansible_collections.llmops.serving.plugins.module_utils import vllm_model_check
from ansible_collections.llmops.serving.plugins.module_utils import vllm_multinode
from ansible_collections.llmops.serving.plugins.module_utils import vllm_shm

ARGS_CHECK_SPEC = dict(
    instances=dict(type="list", elements="dict", required=True),
    common_args=dict(type="dict", default={}),
    common_env=dict(type="dict", default={}),
    python=dict(type="path", required=True),
    device=dict(type="str", choices=["auto", "cuda", "cpu"], default="auto"),
    gpu_count=dict(type="int"),
    parser=dict(type="bool", default=True),
    require_parser=dict(type="bool", default=False),
    check_ports=dict(type="bool", default=True),
    timeout=dict(type="int", default=300),
    cache_dir=dict(type="path"),
    default_gpu_memory_utilization=dict(type="float", default=0.92),
    view=dict(type="list", elements="dict"),
    check_models=dict(type="bool", default=True),
    service_user=dict(type="str", default="vllm"),
    service_group=dict(type="str", default="vllm"),
    protect_home=dict(type="str", default="true"),
    generated_models=dict(type="list", elements="path", default=[]),
    fail_on_missing_model=dict(type="bool", default=True),
)

FAIL_MSG = "vLLM options are invalid (nothing was changed):\n%s"


def count_gpus(dev="/dev"):
    """NVIDIA GPUs from /dev/nvidiaN (when the play did not gather gpu_info)."""
    try:
        return len([n for n in os.listdir(dev) if n.startswith("nvidia") and n[len("nvidia"):].isdigit()])
    except OSError:
        return None


def model_entries(view, instances, common_args):
    """The view entries with the variable path of their max_model_len."""
    entries = []
    for i, entry in enumerate(view or []):
        e = dict(entry)
        e["index"] = i
        if i < len(instances):
            opts = vllm_flags.merged_options(instances[i], common_args)
            key, dummy = vllm_flags.lookup(opts, "max_model_len")
            if key is not None:
                e["max_model_len_path"] = vllm_flags.option_source(i, instances[i], common_args, key)
        entries.append(e)
    return entries


def view_entries(view, instances):
    """``view`` when it holds one entry per instance, in order (the role's vllm_view of
    these vllm_instances); else (None, the problem)."""
    if view is None:
        return None, None
    names = [v.get("name") for v in view]
    wanted = [inst.get("name") for inst in instances]
    if names == wanted:
        return view, None
    return None, vllm_flags.problem("view", None, "type",
                                    "view names the instances %s but instances are %s: pass the instance view "
                                    "built from the same vllm_instances (the role's vllm_view)" % (names, wanted))


def run_argv(entry, instance, python, common_args):
    """The argv an instance runs: its view entry's when there is one."""
    if entry and entry.get("argv"):
        return list(entry["argv"])
    return vllm_args.instance_argv(instance, python, common_args)


def parser_argv(entry, instance, common_args):
    """What the parser parses: the view entry's argv without its interpreter and entry
    point (``-m vllm.entrypoints.cli.main serve``, ``-m MODULE`` or, on a headless node,
    ``-c CODE``); without a view, vllm_flags'."""
    if entry and entry.get("argv"):
        return vllm_args.server_args(entry["argv"])
    return vllm_flags.parser_argv(instance, common_args)


def flag_map(index, instance, entry, common_args):
    """vllm_flags.flag_map, with the options the role adds to a spanning instance
    (--nnodes, --headless, ...) mapped to its ``nodes``."""
    fmap = vllm_flags.flag_map(index, instance, common_args)
    for key in (entry or {}).get("multinode_args") or {}:
        for flag in (vllm_args.option_flag(key), vllm_args.negated_flag(key)):
            fmap[flag] = vllm_flags.inst_path(index, "nodes")
    return fmap


def main_pids(module, entries):
    """Instance name -> MainPID of its unit (each entry's ``unit``: the view's)."""
    systemctl = module.get_bin_path("systemctl")
    pids = {}
    if not systemctl:
        return pids
    for e in entries:
        props, error = systemd.show(module.run_command, e["unit"], ["MainPID"], systemctl)
        pids[e["name"]] = (systemd.int_prop(props, "MainPID") or 0) if not error else 0
    return pids


def venv_identity(python):
    """Size and mtime of the venv's vllm dist-info files: changes when pip installs another vLLM."""
    venv = os.path.dirname(os.path.dirname(python))
    ident = []
    for path in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "vllm*.dist-info", "*"))):
        if os.path.basename(path) in ("METADATA", "RECORD"):
            st = os.stat(path)
            ident.append([path, st.st_size, st.st_mtime_ns])
    return ident


def cache_key(python, argvs):
    blob = json.dumps({"python": python, "argvs": argvs, "venv": venv_identity(python),
                       "parser": hashlib.sha256(vllm_flags.PARSER_CHILD.encode("utf-8")).hexdigest()},
                      sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def cache_read(cache_dir, key):
    path = os.path.join(cache_dir, "parser-%s.json" % key)
    try:
        with open(path) as f:
            out = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return out if isinstance(out, dict) and "results" in out else None


def cache_write(cache_dir, key, out):
    """Store a passing parse (mode 0600 in a 0700 directory) and drop older keys."""
    try:
        if not os.path.isdir(cache_dir):
            os.makedirs(cache_dir, 0o700)
        path = os.path.join(cache_dir, "parser-%s.json" % key)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(out, f)
        os.rename(tmp, path)
        for old in glob.glob(os.path.join(cache_dir, "parser-*.json")):
            if old != path:
                os.unlink(old)
    except (IOError, OSError):
        return False
    return True


def run_parser(module, python, argvs, timeout):
    cmd = [python, "-c", vllm_flags.PARSER_CHILD]
    timeout_bin = module.get_bin_path("timeout")
    if timeout_bin:
        cmd = [timeout_bin, str(timeout)] + cmd
    rc, out, err = module.run_command(
        cmd,
        data=json.dumps({"argvs": argvs}), binary_data=True,
        environ_update=vllm_flags.parser_child_env({}))
    result = vllm_flags.parse_child_output(out)
    if result is None:
        tail = (err or out or "")[-2000:]
        return None, "the parser child (%s) gave no result (rc=%s): %s" % (python, rc, tail)
    if result.get("import_error"):
        return None, "vLLM cannot be imported by %s: %s" % (python, result["import_error"])
    return result, None


def shm_entries(instances, running, views, common_args, common_env):
    """What vllm_shm.check needs of each instance (as it runs; env as the view has it)."""
    entries = []
    for i, inst in enumerate(running):
        if not isinstance(inst, dict):
            continue
        opts = vllm_flags.merged_options(inst, common_args)
        sizes, size_path = [], None
        for names in (("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"), ("data_parallel_size", "dp")):
            key, val = vllm_flags.lookup(opts, *names)
            sizes.append(vllm_flags.int_or_none(val) or 1)
            if key is not None and size_path is None and names[0] != "data_parallel_size":
                size_path = vllm_flags.option_source(i, inst, common_args, key)
        key, backend = vllm_flags.lookup(opts, "distributed_executor_backend")
        view = (views[i] if views is not None and i < len(views) else None) or {}
        env = view.get("env") if isinstance(view.get("env"), dict) else dict(
            common_env or {}, **(inst.get("env") if isinstance(inst.get("env"), dict) else {}))
        entries.append(dict(index=i, name=inst.get("name"), tp=sizes[0], pp=sizes[1], dp=sizes[2],
                            backend=backend, size_path=size_path,
                            backend_path=vllm_flags.option_source(i, instances[i], common_args, key) if key else None,
                            env=env, spans=vllm_flags.spans(inst.get("nodes"))))
    return entries


def generated_models(paths, configs=None):
    """path -> config (None: not known) of the models generated later in the run."""
    out = dict((path, None) for path in paths or [])
    for path, config in (configs or {}).items():
        if path in out:
            out[path] = config
    return out


class ArgsCheck(object):
    """Run the checks with ``module`` (an AnsibleModule: run_command, get_bin_path, check_mode)."""

    def __init__(self, module):
        self.module = module

    def host_shm(self):
        """(this host's /dev/shm as vllm_shm.read_shm() reads it, whether the host is a container)."""
        return vllm_shm.read_shm(), vllm_shm.in_container()

    def run(self, p, generated_configs=None):
        """The result dict; ``problems`` lists every problem, ``msg`` says them when there are any.

        ``generated_configs``: path -> the config.json a model generated later in
        the run will have (vllm_host_state passes its tiny_model's); the model
        checks hold max_model_len against it before the model exists.
        """
        module = self.module
        instances = p["instances"]
        common_args = p["common_args"] or {}
        device = p["device"]
        if device == "auto":
            device = "cuda" if (p["gpu_count"] or os.path.exists("/dev/nvidiactl")) else "cpu"

        problems = []
        for i, inst in enumerate(instances):
            for key in ("name", "model"):
                if not inst.get(key):
                    problems.append(vllm_flags.problem("vllm_instances[%d].%s" % (i, key), None, "type",
                                                       "vllm_instances[%d].%s is required" % (i, key)))
        gpu_count = p["gpu_count"]
        if gpu_count is None and device == "cuda":
            gpu_count = count_gpus()
        views, view_problem = view_entries(p["view"], instances)
        if view_problem:
            problems.append(view_problem)
        entries = views or [None] * len(instances)
        running = [vllm_multinode.running_instance(inst, (e or {}).get("multinode_args"))
                   for inst, e in zip(instances, entries)]
        problems += vllm_flags.check_fictional(instances, common_args, p["common_env"], device)
        problems += vllm_flags.check_ranges(running, common_args, gpu_count, device,
                                            p["default_gpu_memory_utilization"], views)

        missing_models = []
        if p["view"] is not None and p["check_models"]:
            model_problems, missing_models = vllm_model_check.check_models(
                model_entries(p["view"], instances, common_args), p["service_user"], p["service_group"],
                p["protect_home"], generated_models(p["generated_models"], generated_configs),
                p["fail_on_missing_model"])
            problems += [vllm_flags.problem("vllm_instances", None, "model", m) for m in model_problems]

        # /dev/shm for the mp executor's rings: the host's real size (vllm_shm.py).
        problems += [vllm_flags.problem("vllm_instances", "--distributed-executor-backend", "shm", m)
                     for m in vllm_shm.check(shm_entries(instances, running, views, common_args, p["common_env"]),
                                             *self.host_shm())]

        if p["check_ports"]:
            ss = module.get_bin_path("ss")
            if ss:
                rc, out, dummy = module.run_command([ss, "-Hltnp"])
                if rc == 0:
                    listeners = vllm_flags.parse_ss_listeners(out)
                    # The view's entries (name, host, port, unit); without a view, the instances with
                    # their unit names from the view's rule.
                    ports = views or [dict(inst, unit=vllm_instance.instance_paths(inst.get("name"), {})["unit"])
                                      for inst in instances]
                    pids = main_pids(module, [e for e in ports if e.get("name")])
                    problems += vllm_flags.check_ports(ports, listeners, vllm_flags.unit_of_pid, pids)

        result = dict(parser_checked=False, missing_models=missing_models)
        valid = [i for i, inst in enumerate(instances) if inst.get("model") and inst.get("name")]
        result["argv"] = dict((instances[i]["name"], run_argv(entries[i], running[i], p["python"], common_args))
                              for i in valid)

        if not p["parser"]:
            result["parser_skipped_reason"] = "parser=false"
        elif not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
            result["parser_skipped_reason"] = "%s does not exist yet (vLLM not installed)" % p["python"]
            if p["require_parser"]:
                problems.append(vllm_flags.problem("python", None, "parser", result["parser_skipped_reason"]))
        elif valid:
            argvs = [parser_argv(entries[i], running[i], common_args) for i in valid]
            key = cache_key(p["python"], argvs) if p["cache_dir"] else None
            out = cache_read(p["cache_dir"], key) if key else None
            err = None
            result["parser_cached"] = out is not None
            if out is None:
                out, err = run_parser(module, p["python"], argvs, p["timeout"])
            if err:
                # A venv that cannot import vLLM (broken or half-installed) is an
                # install problem: the install phase repairs it and the role runs
                # this check again with require_parser=true afterwards.
                result["parser_skipped_reason"] = err
                if p["require_parser"]:
                    problems.append(vllm_flags.problem("python", None, "parser", err))
            else:
                result["parser_checked"] = True
                result["vllm_version"] = out.get("vllm_version")
                result["elapsed"] = out.get("elapsed")
                fmaps = [flag_map(i, instances[i], entries[i], common_args) for i in valid]
                parser_problems = vllm_flags.parser_problems(out["results"], fmaps, valid)
                problems += parser_problems
                if key and not parser_problems and not result["parser_cached"] and not module.check_mode:
                    cache_write(p["cache_dir"], key, out)

        result["problems"] = problems
        if problems:
            result["msg"] = FAIL_MSG % vllm_flags.format_problems(problems)
        return result
