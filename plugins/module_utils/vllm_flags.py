# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Check vLLM options given as data before any unit changes.

Three layers, cheapest first:

1. ``check_fictional``: options and environment variables that do not exist
   (any more) in vLLM 0.32 - from the user seeds and older tutorials - each
   rejected with the real replacement named, plus option keys given as raw
   flag strings.
2. ``check_ranges``: gpu_memory_utilization in (0, 1], TP x PP x DP <= GPUs
   assigned, kv_cache_dtype choices, ports (and ``check_ports`` for sockets
   already bound by another process).
3. ``PARSER_CHILD``: a script run by the vLLM venv's Python that builds the
   installed vLLM's own server argument parser (no engine, no model load) and
   parses every instance's argv; ``map_parser_error`` maps its messages back
   to the variable that produced the option.

Who does what: ``vllm_args.py`` renders options into argv and quotes it for
systemd; this file validates options; ``vllm_instance.py`` composes both into
the instance view (and runs ``check_fictional``/``check_ranges`` on the
controller, before any host is touched).

Every problem is a dict ``{"path": <variable path>, "option": <flag or key>,
"kind": <fictional|raw_key|reserved|range|port|parser|engine>, "msg": <text>}``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args

INSTANCES_VAR = "vllm_instances"
COMMON_ARGS_VAR = "vllm_common_args"
COMMON_ENV_VAR = "vllm_common_env"

# kv_cache_dtype choices of vLLM 0.32.0 (CacheDType in vllm/config/cache.py);
# the real parser re-checks them against the installed release.
KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2",
    "fp8_inc", "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head",
    "nvfp4", "nvfp4_4over6", "nvfp4_ds_mla", "turboquant_3bit_nc",
    "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4", "ultraquant_4bit",
)

# Fictional or removed options -> what to use instead. Keys are normalised
# (leading dashes stripped, '-' -> '_'). ``{value}`` is the value the user gave.
FICTIONAL_OPTIONS = {
    "enable_flash_attn": (
        "`--enable-flash-attn` does not exist in vLLM. FlashAttention (vLLM's bundled "
        "vllm_flash_attn) is already the default backend on Ampere/Hopper; to pin it set "
        "`attention_backend: FLASH_ATTN` (--attention-backend)"),
    "use_flash_attn": (
        "`--use-flash-attn` does not exist in vLLM; set `attention_backend: FLASH_ATTN` "
        "(--attention-backend)"),
    "use_v2_attention": (
        "`--use-v2-attention` does not exist in vLLM (FA2's sm_80 kernels already run on "
        "sm_86/sm_87); remove it, or choose a backend with `attention_backend: FLASH_ATTN` "
        "(--attention-backend)"),
    "grpc_port": (
        "`--grpc-port` is not a health mechanism: GPUStack and systemd probe HTTP "
        "`GET /health` on the instance's `port`; remove it (in vLLM 0.32 --grpc-port only "
        "exists for the experimental Rust frontend with VLLM_USE_RUST_FRONTEND=1)"),
    "enable_grpc": (
        "`--enable-grpc` does not exist in vLLM: GPUStack and systemd probe HTTP "
        "`GET /health` on the instance's `port`; remove it"),
    "grpc": (
        "`--grpc` replaces the HTTP OpenAI server with a gRPC server; the readiness gate, "
        "GPUStack and monitoring need HTTP `GET /health` and `/metrics`; remove it"),
    "speculative_model": (
        "`--speculative-model` was removed from vLLM; use "
        "`speculative_config: {{model: {value}, num_speculative_tokens: N}}` "
        "(--speculative-config JSON)"),
    "num_speculative_tokens": (
        "`--num-speculative-tokens` was removed from vLLM; use "
        "`speculative_config: {{model: M, num_speculative_tokens: {value}}}` "
        "(--speculative-config JSON)"),
    "speculative_draft_tensor_parallel_size": (
        "`--speculative-draft-tensor-parallel-size` was removed; use "
        "`speculative_config: {{..., draft_tensor_parallel_size: {value}}}`"),
    "speculative_max_model_len": (
        "`--speculative-max-model-len` was removed; use "
        "`speculative_config: {{..., max_model_len: {value}}}`"),
    "ngram_prompt_lookup_max": (
        "`--ngram-prompt-lookup-max` was removed; use "
        "`speculative_config: {{method: ngram, num_speculative_tokens: N, prompt_lookup_max: {value}}}`"),
    "disable_log_requests": (
        "`--disable-log-requests` was removed from vLLM (the server exits on it); request "
        "logging is already off by default - remove the option (`enable_log_requests: true` "
        "turns logging on)"),
    "swap_space": (
        "`--swap-space` was removed from vLLM (the server exits on it): the V1 engine has no "
        "CPU swap space; remove it (size the KV cache with `gpu_memory_utilization` or "
        "`kv_cache_memory_bytes`, offload KV to CPU memory with `kv_offloading_size`)"),
    "gpu_cache_usage_perc": (
        "`gpu_cache_usage_perc` is not an option but an old metric name; vLLM 0.32 exports "
        "`vllm:kv_cache_usage_perc` (0..1); remove it"),
}

# Options the role renders itself from the instance's own keys, or that must
# never be in argv.
RESERVED_OPTIONS = {
    "model": "set the instance's `model` key instead",
    "model_tag": "set the instance's `model` key instead",
    "served_model_name": "set the instance's `served_model_name` key instead",
    "host": "set the instance's `host` key instead",
    "port": "set the instance's `port` key instead",
    "api_key": ("an API key in argv is visible in `ps` and `systemctl show`; set `vllm_api_key` "
                "(vaulted) - the role writes it as VLLM_API_KEY into the root-only env file"),
}

FICTIONAL_ENV = {
    "VLLM_ATTENTION_BACKEND": (
        "environment variable `VLLM_ATTENTION_BACKEND` is ignored by vLLM 0.32 (only a "
        "warning); set `attention_backend: {value}` in the instance's `args` or in "
        "vllm_common_args (--attention-backend)"),
}

# Device-fitting advice where the CUDA advice would be wrong: the CPU build
# has its own attention backend and picks it itself; FLASH_ATTN there only
# makes vLLM log that it cannot use it and fall back.
FICTIONAL_ENV_CPU = {
    "VLLM_ATTENTION_BACKEND": (
        "environment variable `VLLM_ATTENTION_BACKEND` is ignored by vLLM 0.32 (only a "
        "warning); on a CPU host remove it - the CPU build chooses its own attention "
        "backend (FLASH_ATTN and the other GPU backends do not run there)"),
}

# vLLM 0.32's default --gpu-memory-utilization; the role passes its own named
# default (vllm_default_gpu_memory_utilization) in its place.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92

_RAW_KEY = re.compile(r"^-|\s|=")


def normalize_key(key):
    """``--max-model-len`` / ``max-model-len`` / ``max_model_len`` -> ``max_model_len``."""
    return str(key).lstrip("-").replace("-", "_")


def problem(path, option, kind, msg):
    return {"path": path, "option": option, "kind": kind, "msg": msg}


def _inst_path(index, *parts):
    path = "%s[%d]" % (INSTANCES_VAR, index)
    for part in parts:
        path += "." + str(part)
    return path


def _fictional_in_args(options, base_path):
    problems = []
    if options is None:
        return problems
    if not isinstance(options, dict):
        return [problem(base_path, None, "type",
                        "%s must be a dict of vLLM options (e.g. {max_model_len: 8192}), got %s"
                        % (base_path, type(options).__name__))]
    for key, value in options.items():
        path = "%s.%s" % (base_path, key)
        if _RAW_KEY.search(str(key)):
            problems.append(problem(
                path, str(key), "raw_key",
                "%s: option keys are data, not raw flags: write `%s: <value>` (snake_case, no "
                "leading dashes, no spaces or '='); booleans render --x / --no-x"
                % (path, normalize_key(str(key).split("=", 1)[0].split()[0] if str(key).strip() else key))))
            norm = normalize_key(str(key).split("=", 1)[0].split()[0]) if str(key).strip() else ""
            if norm in FICTIONAL_OPTIONS:
                problems.append(problem(path, norm, "fictional", "%s: %s" % (
                    path, FICTIONAL_OPTIONS[norm].format(value=value))))
            continue
        norm = normalize_key(key)
        if norm in FICTIONAL_OPTIONS:
            problems.append(problem(path, vllm_args.option_flag(norm), "fictional", "%s: %s" % (
                path, FICTIONAL_OPTIONS[norm].format(value=value if value is not None else "M"))))
        elif norm in RESERVED_OPTIONS:
            problems.append(problem(path, vllm_args.option_flag(norm), "reserved",
                                    "%s: %s" % (path, RESERVED_OPTIONS[norm])))
    return problems


def _fictional_in_env(env, base_path, device="auto"):
    problems = []
    table = FICTIONAL_ENV_CPU if device == "cpu" else FICTIONAL_ENV
    if env is None:
        return problems
    if not isinstance(env, dict):
        return [problem(base_path, None, "type", "%s must be a dict of environment variables, got %s"
                        % (base_path, type(env).__name__))]
    for key, value in env.items():
        if str(key) in table:
            path = "%s.%s" % (base_path, key)
            problems.append(problem(path, str(key), "fictional", "%s: %s" % (
                path, table[str(key)].format(value=value or "FLASH_ATTN"))))
    return problems


def check_fictional(instances, common_args=None, common_env=None, device="auto"):
    """Problems from fictional/removed options, raw flag keys and reserved keys.

    ``device`` (cpu/cuda/auto) picks advice that fits the host.
    """
    problems = []
    problems += _fictional_in_args(common_args, COMMON_ARGS_VAR)
    problems += _fictional_in_env(common_env, COMMON_ENV_VAR, device)
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            problems.append(problem(_inst_path(i), None, "type", "%s must be a dict" % _inst_path(i)))
            continue
        problems += _fictional_in_args(inst.get("args"), _inst_path(i, "args"))
        problems += _fictional_in_env(inst.get("env"), _inst_path(i, "env"), device)
        for key in inst:
            if normalize_key(key) in FICTIONAL_OPTIONS:
                path = _inst_path(i, key)
                problems.append(problem(path, key, "fictional", "%s: %s (options go under `args`)" % (
                    path, FICTIONAL_OPTIONS[normalize_key(key)].format(value=inst[key]))))
    return problems


def option_source(instance_index, instance, common_args, key):
    """Variable path of an option after merging (the instance's args win)."""
    own = instance.get("args") or {}
    if isinstance(own, dict) and key in own:
        return _inst_path(instance_index, "args", key)
    return "%s.%s" % (COMMON_ARGS_VAR, key)


def merged_options(instance, common_args):
    own = instance.get("args") or {}
    if not isinstance(own, dict):
        own = {}
    return vllm_args.merge_options(common_args if isinstance(common_args, dict) else {}, own)


def _lookup(options, *names):
    """First non-None value among option aliases, with the key used."""
    for name in names:
        for key, value in options.items():
            if normalize_key(key) == name and value is not None:
                return key, value
    return None, None


def _as_int(value):
    if isinstance(value, bool):
        raise ValueError(value)
    return int(str(value))


def check_ranges(instances, common_args=None, gpu_count=None, device="auto",
                 default_gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION):
    """Range and consistency problems that need no vLLM.

    ``default_gpu_memory_utilization``: the share an instance without the
    option takes (the role's vllm_default_gpu_memory_utilization).
    """
    problems = []
    ports = {}
    gpu_share = {}
    unpinned = []
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            continue
        opts = merged_options(inst, common_args)

        # Port.
        port = inst.get("port", 8000)
        try:
            port_i = _as_int(port)
            if not 1 <= port_i <= 65535:
                raise ValueError(port)
        except (TypeError, ValueError):
            problems.append(problem(_inst_path(i, "port"), "--port", "range",
                                    "%s: port must be an integer in 1..65535 (got %r)"
                                    % (_inst_path(i, "port"), port)))
        else:
            if port_i in ports:
                problems.append(problem(_inst_path(i, "port"), "--port", "range",
                                        "%s: port %d is also used by %s; give every instance its own port"
                                        % (_inst_path(i, "port"), port_i, _inst_path(ports[port_i], "port"))))
            ports.setdefault(port_i, i)

        # gpu_memory_utilization in (0, 1].
        key, gmu = _lookup(opts, "gpu_memory_utilization", "device_memory_utilization")
        gmu_f = None
        if key is not None:
            path = option_source(i, inst, common_args, key)
            try:
                if isinstance(gmu, bool):
                    raise ValueError(gmu)
                gmu_f = float(gmu)
                if not 0.0 < gmu_f <= 1.0:
                    raise ValueError(gmu)
            except (TypeError, ValueError):
                gmu_f = None
                problems.append(problem(path, "--gpu-memory-utilization", "range",
                                        "%s: gpu_memory_utilization is the share of each GPU's total memory "
                                        "this instance may take and must be in (0, 1] (got %r), e.g. 0.90"
                                        % (path, gmu)))

        # kv_cache_dtype choices.
        key, kvd = _lookup(opts, "kv_cache_dtype")
        if key is not None and str(kvd) not in KV_CACHE_DTYPES:
            path = option_source(i, inst, common_args, key)
            problems.append(problem(path, "--kv-cache-dtype", "range",
                                    "%s: kv_cache_dtype %r is not a vLLM choice; use one of %s "
                                    "(fp8 = fp8_e4m3 on Hopper)" % (path, kvd, ", ".join(KV_CACHE_DTYPES))))

        # Parallel sizes vs GPUs assigned.
        sizes = {}
        for names, label in ((("tensor_parallel_size", "tp"), "tensor_parallel_size"),
                             (("pipeline_parallel_size", "pp"), "pipeline_parallel_size"),
                             (("data_parallel_size", "dp"), "data_parallel_size")):
            key, val = _lookup(opts, *names)
            if key is None:
                sizes[label] = (1, None)
                continue
            path = option_source(i, inst, common_args, key)
            try:
                v = _as_int(val)
                if v < 1:
                    raise ValueError(val)
                sizes[label] = (v, path)
            except (TypeError, ValueError):
                problems.append(problem(path, vllm_args.option_flag(label), "range",
                                        "%s: %s must be an integer >= 1 (got %r)" % (path, label, val)))
                sizes[label] = (1, path)
        # The uni executor runs the whole engine in one process: with more than
        # one worker it waits forever for peers that never start.
        key, backend = _lookup(opts, "distributed_executor_backend")
        world = sizes["tensor_parallel_size"][0] * sizes["pipeline_parallel_size"][0]
        if key is not None and str(backend) == "uni" and world > 1:
            path = sizes["tensor_parallel_size"][1] or sizes["pipeline_parallel_size"][1]
            problems.append(problem(path, "--distributed-executor-backend", "range",
                                    "%s: tensor_parallel_size x pipeline_parallel_size = %d needs %d worker "
                                    "processes, but distributed_executor_backend is `uni` (%s; one process): "
                                    "the engine would wait for its peers until the readiness timeout. Use "
                                    "tensor_parallel_size: 1 or distributed_executor_backend: mp"
                                    % (path, world, world, option_source(i, inst, common_args, key))))
        gpus = inst.get("gpus")
        if gpus is not None and not isinstance(gpus, (list, tuple)):
            problems.append(problem(_inst_path(i, "gpus"), None, "type",
                                    "%s must be a list of GPU indexes, e.g. [0, 1]" % _inst_path(i, "gpus")))
            gpus = None
        if gpus is not None and len(set(str(g) for g in gpus)) != len(gpus):
            problems.append(problem(_inst_path(i, "gpus"), None, "range",
                                    "%s lists a GPU twice: %r" % (_inst_path(i, "gpus"), list(gpus))))
        if device == "cuda":
            assigned, where = None, None
            if gpus is not None:
                assigned, where = len(gpus), "%s (%r)" % (_inst_path(i, "gpus"), list(gpus))
            elif gpu_count is not None:
                assigned, where = int(gpu_count), "the host's GPU count"
            needed = sizes["tensor_parallel_size"][0] * sizes["pipeline_parallel_size"][0] \
                * sizes["data_parallel_size"][0]
            if assigned is not None and needed > assigned:
                path = (sizes["tensor_parallel_size"][1] or sizes["pipeline_parallel_size"][1]
                        or sizes["data_parallel_size"][1] or _inst_path(i))
                problems.append(problem(path, "--tensor-parallel-size", "range",
                                        "%s: tensor_parallel_size x pipeline_parallel_size x data_parallel_size "
                                        "= %d x %d x %d = %d GPUs, but %s gives %d; lower the sizes or assign "
                                        "more GPUs in %s" % (
                                            path, sizes["tensor_parallel_size"][0],
                                            sizes["pipeline_parallel_size"][0], sizes["data_parallel_size"][0],
                                            needed, where, assigned, _inst_path(i, "gpus"))))
            if gpus is not None and gpu_count is not None:
                bad = [g for g in gpus if not str(g).isdigit() or int(g) >= int(gpu_count)]
                if bad:
                    problems.append(problem(_inst_path(i, "gpus"), None, "range",
                                            "%s: GPU(s) %r do not exist on this host (%d GPUs: 0..%d)"
                                            % (_inst_path(i, "gpus"), bad, int(gpu_count), int(gpu_count) - 1)))
            share = gmu_f if gmu_f is not None else float(default_gpu_memory_utilization)
            if gpus is not None:
                for g in gpus:
                    gpu_share.setdefault(str(g), []).append((i, share))
            else:
                unpinned.append((i, share))
    # An instance without `gpus` sees every GPU of the host and takes its
    # share of each: on a multi-instance host it shares them all.
    pinned = set(i for users in gpu_share.values() for i, dummy in users)
    if unpinned and len(unpinned) + len(pinned) > 1:
        all_gpus = set(gpu_share) or set(["(every GPU)"])
        if gpu_count is not None:
            all_gpus |= set(str(g) for g in range(int(gpu_count)))
        for g in all_gpus:
            gpu_share.setdefault(g, []).extend(unpinned)
    for gpu, users in sorted(gpu_share.items()):
        total = sum(s for dummy, s in users)
        if len(users) > 1 and total > 1.0 + 1e-9:
            names = ", ".join("%s=%.2f" % (_inst_path(i), s) for i, s in users)
            problems.append(problem(_inst_path(users[-1][0], "gpus"), "--gpu-memory-utilization", "range",
                                    "GPU %s is shared by %s: gpu_memory_utilization adds up to %.2f > 1 "
                                    "(an instance without the option takes vllm_default_gpu_memory_utilization "
                                    "= %.2f; an instance without `gpus` uses every GPU); give each instance its "
                                    "own GPUs (`gpus: [N]`) or lower the shares"
                                    % (gpu, names, total, float(default_gpu_memory_utilization))))
    return problems


# --- ports -------------------------------------------------------------------

_SS_USERS = re.compile(r'\("([^"]*)",pid=(\d+),fd=\d+\)')
_WILDCARD = ("0.0.0.0", "::", "*", "")


def parse_ss_listeners(text):
    """Parse ``ss -Hltnp`` (or ``ss -ltnp``) output into listener dicts."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split()
        if not fields or fields[0] != "LISTEN" or len(fields) < 5:
            continue
        local = fields[3]
        addr, dummy, port = local.rpartition(":")
        if not port.isdigit():
            continue
        addr = addr.strip("[]")
        if "%" in addr:  # 127.0.0.1%lo
            addr = addr.split("%", 1)[0]
        users = _SS_USERS.findall(line)
        out.append({"address": addr, "port": int(port),
                    "pids": sorted(set(int(p) for dummy, p in users)),
                    "processes": sorted(set(n for n, dummy in users))})
    return out


def addresses_overlap(a, b):
    a = "" if a in _WILDCARD else a
    b = "" if b in _WILDCARD else b
    if a == "" or b == "":
        return True
    if a in ("localhost",):
        a = "127.0.0.1"
    if b in ("localhost",):
        b = "127.0.0.1"
    return a == b


def unit_of_pid(pid, proc_root="/proc"):
    """The systemd unit a process runs in (from its cgroup), or None."""
    try:
        with open("%s/%d/cgroup" % (proc_root, pid)) as f:
            text = f.read()
    except (IOError, OSError):
        return None
    for line in text.splitlines():
        for part in line.rsplit(":", 1)[-1].split("/"):
            if part.endswith(".service"):
                return part
    return None


def check_ports(instances, listeners, own_unit_of_pid, unit_main_pids):
    """Ports bound by a process other than the instance's own vllm@NAME.

    ``listeners``: from parse_ss_listeners; ``own_unit_of_pid``: pid -> unit
    name or None; ``unit_main_pids``: instance name -> MainPID (0 = not running).
    """
    problems = []
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            continue
        try:
            port = _as_int(inst.get("port", 8000))
        except (TypeError, ValueError):
            continue
        host = str(inst.get("host", "127.0.0.1"))
        unit = "vllm@%s.service" % inst.get("name")
        for lst in listeners:
            if lst["port"] != port or not addresses_overlap(lst["address"], host):
                continue
            main_pid = unit_main_pids.get(inst.get("name")) or 0
            if lst["pids"]:
                others = [p for p in lst["pids"] if p != main_pid and own_unit_of_pid(p) != unit]
                if not others:
                    continue
                who = ", ".join("pid %d (%s)" % (p, own_unit_of_pid(p) or "no unit") for p in others)
            else:
                if main_pid:
                    # Owner unknown (no permission to see it) and our unit runs: assume ours.
                    continue
                who = "an unknown process"
            problems.append(problem(_inst_path(i, "port"), "--port", "port",
                                    "%s: port %d on %s is already bound by %s, not by %s; choose a free "
                                    "port or stop that process" % (_inst_path(i, "port"), port,
                                                                   lst["address"] or "*", who, unit)))
            break
    return problems


# --- the installed vLLM's own parser ---------------------------------------------

RESULT_MARKER = "LLMOPS_VLLM_ARGS_CHECK:"

# Run by the vLLM venv's Python: python -c PARSER_CHILD < {"argvs": [[...], ...]}
# Builds the server's real parser (vllm.entrypoints.launchers.cli_args in 0.32;
# older releases: vllm.entrypoints.openai.cli_args), parses each argv, runs the
# server's own pre-load checks and builds AsyncEngineArgs (a dataclass: no
# engine, no model config, no weights). HF_HUB_OFFLINE is forced to 0 in the
# child so that AsyncEngineArgs does not resolve model ids to paths.
PARSER_CHILD = r'''
import json, os, sys, time, dataclasses, typing
t0 = time.time()
req = json.loads(sys.stdin.read())
out = {"results": []}
def emit():
    out["elapsed"] = round(time.time() - t0, 3)
    sys.stdout.write("\n" + MARKER + json.dumps(out) + "\n"); sys.stdout.flush()
try:
    import vllm
    out["vllm_version"] = getattr(vllm, "__version__", None)
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.engine.arg_utils import AsyncEngineArgs
except Exception as e:
    out["import_error"] = "%s: %s" % (type(e).__name__, e)
    emit(); sys.exit(0)
out["import_s"] = round(time.time() - t0, 3)
class ArgError(Exception):
    pass
pending = []
def _error(msg):
    # argparse's parse_args() calls error() for unrecognized arguments after
    # parsing everything else: record it and go on, so that the other checks
    # of the same instance still run. Every other error stops the parse.
    if str(msg).startswith("unrecognized arguments:"):
        pending.append(str(msg))
        return
    raise ArgError(msg)
def extra_checks(ns):
    errs = []
    ab = getattr(ns, "attention_backend", None)
    if ab is not None:
        try:
            from vllm.config.attention import AttentionConfig
            AttentionConfig.validate_backend_before(ab)
        except KeyError:
            try:
                from vllm.v1.attention.backends.registry import AttentionBackendEnum
                names = ", ".join(m.name for m in AttentionBackendEnum)
            except Exception:
                names = "see vllm --help"
            errs.append("argument --attention-backend: invalid choice: %r (choose from %s)" % (ab, names))
        except Exception as e:
            errs.append("argument --attention-backend: %s" % e)
    q = getattr(ns, "quantization", None)
    if q is not None:
        try:
            from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
            if q not in QUANTIZATION_METHODS:
                errs.append("argument --quantization/-q: invalid choice: %r (choose from %s)"
                            % (q, ", ".join(QUANTIZATION_METHODS)))
        except ImportError:
            pass
    sc = getattr(ns, "speculative_config", None)
    if isinstance(sc, dict):
        try:
            from vllm.config.speculative import SpeculativeConfig
            fields = set(getattr(SpeculativeConfig, "__dataclass_fields__", {}))
            bad = sorted(k for k in sc if fields and k not in fields)
            if bad:
                errs.append("argument --speculative-config/-sc: unknown key(s) %s (known: %s)"
                            % (", ".join(bad), ", ".join(sorted(f for f in fields if not f.startswith("_")))))
        except ImportError:
            pass
        n = sc.get("num_speculative_tokens")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            errs.append("argument --speculative-config/-sc: num_speculative_tokens must be an integer >= 1 (got %r)" % (n,))
    return errs
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm-server"))
parser.error = _error
out["parser_s"] = round(time.time() - t0, 3)
for argv in req["argvs"]:
    res = {"ok": True, "errors": []}
    del pending[:]
    try:
        ns = parser.parse_args(argv)
        for m in pending:
            res["errors"].append({"stage": "parser", "msg": m})
    except ArgError as e:
        res["ok"] = False; res["errors"].append({"stage": "parser", "msg": str(e)})
        out["results"].append(res); continue
    except SystemExit as e:
        res["ok"] = False; res["errors"].append({"stage": "parser", "msg": "parser exited (%s)" % e})
        out["results"].append(res); continue
    if getattr(ns, "model_tag", None) is not None and not pending:
        res["errors"].append({"stage": "parser", "msg": "unexpected positional value %r (an option value without its flag, "
                              "or a list given to a single-value option?)" % ns.model_tag})
    try:
        validate_parsed_serve_args(ns)
    except Exception as e:
        res["errors"].append({"stage": "server", "msg": "%s" % e})
    for m in extra_checks(ns):
        res["errors"].append({"stage": "parser", "msg": m})
    try:
        AsyncEngineArgs.from_cli_args(ns)
    except Exception as e:
        res["errors"].append({"stage": "engine", "msg": "%s: %s" % (type(e).__name__, e)})
    res["ok"] = not res["errors"]
    out["results"].append(res)
emit()
'''.replace("MARKER", repr(RESULT_MARKER))


def parser_child_env(base_env):
    env = dict(base_env or {})
    env.update({"HF_HUB_OFFLINE": "0", "VLLM_LOGGING_LEVEL": "ERROR",
                "VLLM_CONFIGURE_LOGGING": "0", "PYTHONWARNINGS": "ignore",
                "TOKENIZERS_PARALLELISM": "false"})
    return env


def parse_child_output(stdout):
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    return None


def flag_map(index, instance, common_args, options=None):
    """Every flag the argv of one instance can contain -> variable path."""
    fmap = {"--model": _inst_path(index, "model"),
            "--served-model-name": _inst_path(index, "served_model_name"),
            "--host": _inst_path(index, "host"),
            "--port": _inst_path(index, "port")}
    opts = options if options is not None else merged_options(instance, common_args)
    for key in opts:
        path = option_source(index, instance, common_args, key)
        for flag in (vllm_args.option_flag(key), vllm_args.negated_flag(key)):
            fmap[flag] = path
            fmap[flag.replace("_", "-")] = path
    return fmap


_FLAG_RE = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)")


def map_parser_error(msg, fmap):
    """Variable paths and flags named by one argparse / validation message."""
    paths, flags = [], []
    m = re.match(r"^argument ([^:]+):", msg)
    if m:
        candidates = m.group(1).split("/")
    elif msg.startswith("unrecognized arguments:"):
        candidates = msg[len("unrecognized arguments:"):].split()
    else:
        candidates = _FLAG_RE.findall(msg)
    for cand in candidates:
        cand = cand.strip()
        if not cand.startswith("-"):
            continue
        flag = cand.split("=", 1)[0]
        flags.append(flag)
        path = fmap.get(flag) or fmap.get(flag.replace("_", "-"))
        if path and path not in paths:
            paths.append(path)
    return paths, flags


def parser_problems(results, instances_argv_maps, indexes=None):
    """Turn the child's per-instance results into problems with variable paths.

    ``indexes``: the position in vllm_instances of each result (default 0..n-1).
    """
    problems = []
    if indexes is None:
        indexes = list(range(len(results)))
    for index, res, fmap in zip(indexes, results, instances_argv_maps):
        for err in res.get("errors", []):
            paths, flags = map_parser_error(err["msg"], fmap)
            path = ", ".join(paths) if paths else _inst_path(index)
            kind = "parser" if err.get("stage") == "parser" else "engine"
            problems.append(problem(path, flags[0] if flags else None, kind,
                                    "%s: the installed vLLM rejects it: %s" % (path, err["msg"])))
    return problems


def _checked_elsewhere(key):
    norm = normalize_key(key)
    return bool(_RAW_KEY.search(str(key))) or norm in FICTIONAL_OPTIONS or norm in RESERVED_OPTIONS


def parser_argv(instance, common_args):
    """Argv (without the interpreter) that the parser check parses.

    Options already rejected by check_fictional (fictional, reserved, raw
    keys) are left out so that the parser reports the remaining problems
    instead of the same ones again.
    """
    inst = dict(instance)
    args = inst.get("args") if isinstance(inst.get("args"), dict) else {}
    common = common_args if isinstance(common_args, dict) else {}
    inst["args"] = dict((k, v) for k, v in args.items() if not _checked_elsewhere(k))
    common = dict((k, v) for k, v in common.items() if not _checked_elsewhere(k))
    return vllm_args.instance_argv(inst, "python", common)[3:]


def format_problems(problems):
    return "\n".join("- " + p["msg"] for p in problems)
