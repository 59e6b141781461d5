# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Layer 3: the installed vLLM's own server argument parser.

``PARSER_CHILD`` is run by the vLLM venv's Python: it builds the parser (no
engine, no model load) and parses every instance's argv; ``map_parser_error``
maps its messages back to the variable that produced the option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.fictional import checked_elsewhere
from ansible_collections.llmops.serving.plugins.module_utils.vllm_flags.options import inst_path, merged_options, option_source, problem

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
has_model_tag = any(getattr(a, "dest", None) == "model_tag" for a in parser._actions)
for argv in req["argvs"]:
    res = {"ok": True, "errors": []}
    del pending[:]
    try:
        # `vllm serve MODEL ...` (the model positional): a release whose server parser has
        # no model_tag takes the model as --model, as its `vllm serve` does.
        positional = bool(argv) and not str(argv[0]).startswith("-")
        ns = parser.parse_args(["--model"] + argv if positional and not has_model_tag else argv)
        for m in pending:
            res["errors"].append({"stage": "parser", "msg": m})
    except ArgError as e:
        res["ok"] = False; res["errors"].append({"stage": "parser", "msg": str(e)})
        out["results"].append(res); continue
    except SystemExit as e:
        res["ok"] = False; res["errors"].append({"stage": "parser", "msg": "parser exited (%s)" % e})
        out["results"].append(res); continue
    if getattr(ns, "model_tag", None) is not None and argv and ns.model_tag == argv[0]:
        # `vllm serve MODEL`: the model positional, first (ServeSubcommand.cmd does the same).
        ns.model = ns.model_tag
    elif getattr(ns, "model_tag", None) is not None and not pending:
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
    fmap = {"--model": inst_path(index, "model"),
            "--served-model-name": inst_path(index, "served_model_name"),
            "--host": inst_path(index, "host"),
            "--port": inst_path(index, "port")}
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
            path = ", ".join(paths) if paths else inst_path(index)
            kind = "parser" if err.get("stage") == "parser" else "engine"
            problems.append(problem(path, flags[0] if flags else None, kind,
                                    "%s: the installed vLLM rejects it: %s" % (path, err["msg"])))
    return problems


def parser_argv(instance, common_args):
    """Argv (without the interpreter) that the parser check parses.

    Options already rejected by check_fictional (fictional, reserved, raw
    keys) are left out so that the parser reports the remaining problems
    instead of the same ones again.
    """
    inst = dict(instance)
    args = inst.get("args") if isinstance(inst.get("args"), dict) else {}
    common = common_args if isinstance(common_args, dict) else {}
    inst["args"] = dict((k, v) for k, v in args.items() if not checked_elsewhere(k))
    common = dict((k, v) for k, v in common.items() if not checked_elsewhere(k))
    return vllm_args.instance_argv(inst, "python", common)[3:]
