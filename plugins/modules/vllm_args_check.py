#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_args_check
short_description: Check vLLM options given as data with the installed vLLM's own parser, before anything restarts
version_added: "0.2.0"
description:
  - Read-only check of the vLLM server options of every instance of the
    C(vllm_service) role, run before any unit or environment file changes.
  - First rejects fictional or removed options (C(enable_flash_attn),
    C(use_v2_attention), C(grpc_port)/C(enable_grpc), C(speculative_model)/
    C(num_speculative_tokens), C(disable_log_requests), C(swap_space),
    C(gpu_cache_usage_perc), env C(VLLM_ATTENTION_BACKEND)) with the real
    replacement named, option keys written as raw flags (C(--x), spaces,
    C(=)), and keys the role sets itself (C(model), C(port), C(api_key), ...).
  - Then range checks - C(gpu_memory_utilization) in (0, 1],
    C(tensor_parallel_size) x C(pipeline_parallel_size) x C(data_parallel_size)
    <= GPUs assigned on CUDA hosts, GPUs shared by instances whose memory
    shares add up to more than 1, C(kv_cache_dtype) choices, ports in
    1..65535, unique, and not bound by a process other than the instance's
    own C(vllm@NAME) unit.
  - Then renders each instance's argv exactly as the unit runs it and parses
    all of them in B(one) child process of O(python) with the installed
    vLLM's own server argument parser, its pre-load checks and
    C(AsyncEngineArgs) (no engine, no model load), plus the attention backend,
    quantization and C(speculative_config) keys. Errors are mapped back to the
    variable that produced the option (for example
    C(vllm_instances[0].args.max_model_len)).
  - Fails with every problem listed. Never changes anything (C(changed=false));
    runs in check mode too.
  - When O(python) does not exist yet (check mode on a host where vLLM is not
    installed), the parser check is skipped and reported (RV(parser_checked)
    false) unless O(require_parser=true). The same holds when the venv cannot import vLLM.
options:
  instances:
    description:
      - The role's C(vllm_instances) list. Each entry has C(name), C(model),
        optional C(served_model_name), C(host) (default C(127.0.0.1)),
        C(port) (default C(8000)), C(args) (dict of vLLM options), C(env)
        (dict) and C(gpus) (list of GPU indexes).
    type: list
    elements: dict
    required: true
  common_args:
    description: The role's C(vllm_common_args), merged under each instance's C(args) (the instance wins).
    type: dict
    default: {}
  common_env:
    description: The role's C(vllm_common_env).
    type: dict
    default: {}
  python:
    description: The vLLM venv's interpreter, for example C(/opt/vllm/venv/bin/python). It is the argv[0] of every instance.
    type: path
    required: true
  device:
    description: C(cuda) enables the GPU checks; C(cpu) skips them; C(auto) treats the host as C(cuda) when O(gpu_count) is given or C(/dev/nvidiactl) exists.
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  gpu_count:
    description: GPUs on the host, used for instances without C(gpus) and to check GPU indexes.
    type: int
  parser:
    description: Run the installed vLLM's parser check (about 20 s on 2 CPU cores, mostly importing vLLM).
    type: bool
    default: true
  require_parser:
    description: Fail when O(python) is missing instead of skipping the parser check.
    type: bool
    default: false
  check_ports:
    description: Look for listeners on the instances' ports (C(ss -Hltnp)) owned by something other than C(vllm@NAME).
    type: bool
    default: true
  default_gpu_memory_utilization:
    description:
      - Share of each GPU an instance without C(gpu_memory_utilization) takes
        (the role's C(vllm_default_gpu_memory_utilization); vLLM's default is 0.92).
    type: float
    default: 0.92
  view:
    description:
      - The instance view (C(vllm_view), from the C(llmops.serving.vllm_instance_view) filter). When given, the
        model of each instance is checked on the host too, before anything is installed - the directory exists
        (unless O(fail_on_missing_model=false)), the service user can read it, C(ProtectHome) does not hide it,
        a relative path or hub id is not used with C(HF_HUB_OFFLINE=1), and C(max_model_len) is not above the
        model's C(max_position_embeddings) (times the C(rope_scaling) factor) from its C(config.json).
    type: list
    elements: dict
  service_user:
    description: User the service runs as (for the model readability check). A user that does not exist yet owns nothing.
    type: str
    default: vllm
  service_group:
    description: Group of the service user.
    type: str
    default: vllm
  protect_home:
    description: The unit's C(ProtectHome) value (C(true)/C(tmpfs) hide /home, /root and /run/user).
    type: str
    default: "true"
  generated_models:
    description: Model paths the role generates later in the same run (skipped by the model checks).
    type: list
    elements: path
    default: []
  fail_on_missing_model:
    description: A missing model directory is a problem (false in check mode, where RV(missing_models) lists them).
    type: bool
    default: true
  timeout:
    description: Seconds the parser child may take.
    type: int
    default: 300
  cache_dir:
    description:
      - Directory for the parser results (root-only, mode 0700). The parser
        step is then skipped when the same argvs were already parsed by the
        same installed vLLM (key - the argvs, the parser code and the size and
        mtime of the venv's C(vllm*.dist-info) C(METADATA) and C(RECORD)),
        which makes a no-op re-run about 7 s faster per host on 2 cores.
        Another pip-installed vLLM or any changed option means a new key and
        a fresh parse. Only a passing parse is stored, and never in check
        mode; the file of an older key is removed. Unset, the parser always runs.
    type: path
requirements:
  - C(ss) (iproute2) on the target for O(check_ports)
  - the vLLM venv for O(parser)
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the vLLM options of every instance (before any template task)
  llmops.serving.vllm_args_check:
    instances: "{{ vllm_instances }}"
    common_args: "{{ vllm_common_args }}"
    common_env: "{{ vllm_common_env }}"
    python: "{{ vllm_venv }}/bin/python"
    device: "{{ _vllm_device }}"
  register: vllm_args_checked

- name: Only the fictional-flag and range checks (no vLLM needed)
  llmops.serving.vllm_args_check:
    instances:
      - name: qwen
        model: /srv/models/Qwen2.5-7B-Instruct
        port: 8000
        gpus: [0]
        args:
          gpu_memory_utilization: 0.9
          max_model_len: 8192
    python: /opt/vllm/venv/bin/python
    device: cuda
    parser: false
"""

RETURN = r"""
argv:
  description: Rendered argv of each instance, as its unit runs it (no secrets are ever in argv).
  returned: always
  type: dict
  sample: {"default": ["/opt/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/srv/models/tiny"]}
problems:
  description: Every problem found (empty when the options are valid).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Variable path, for example C(vllm_instances[0].args.swap_space).
      type: str
    option:
      description: The flag or key concerned, when known.
      type: str
    kind:
      description: fictional, raw_key, reserved, type, range, port, parser or engine.
      type: str
    msg:
      description: What is wrong and the fix.
      type: str
parser_checked:
  description: Whether the installed vLLM's parser checked the argv.
  returned: always
  type: bool
parser_skipped_reason:
  description: Why the parser check did not run.
  returned: when parser_checked is false
  type: str
parser_cached:
  description: Whether the parser result came from O(cache_dir) (same argvs, same installed vLLM) instead of a new parse.
  returned: when the parser step ran or was answered from the cache
  type: bool
vllm_version:
  description: Version of the vLLM that parsed the argv.
  returned: when parser_checked
  type: str
missing_models:
  description: Names of the instances whose model directory is missing (only with O(view)).
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds the parser child took (import, parser build, all instances).
  returned: when parser_checked
  type: float
"""

import glob
import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import systemd
from ansible_collections.llmops.serving.plugins.module_utils import vllm_args
from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils import vllm_model_check


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


def _main_pids(module, names):
    systemctl = module.get_bin_path("systemctl")
    pids = {}
    if not systemctl:
        return pids
    for name in names:
        props, error = systemd.show(module.run_command, "vllm@%s.service" % name, ["MainPID"], systemctl)
        pids[name] = (systemd.int_prop(props, "MainPID") or 0) if not error else 0
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
            service_user=dict(type="str", default="vllm"),
            service_group=dict(type="str", default="vllm"),
            protect_home=dict(type="str", default="true"),
            generated_models=dict(type="list", elements="path", default=[]),
            fail_on_missing_model=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
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
    problems += vllm_flags.check_fictional(instances, common_args, p["common_env"], device)
    problems += vllm_flags.check_ranges(instances, common_args, gpu_count, device,
                                        p["default_gpu_memory_utilization"])

    missing_models = []
    if p["view"] is not None:
        model_problems, missing_models = vllm_model_check.check_models(
            model_entries(p["view"], instances, common_args), p["service_user"], p["service_group"],
            p["protect_home"], p["generated_models"], p["fail_on_missing_model"])
        problems += [vllm_flags.problem("vllm_instances", None, "model", m) for m in model_problems]

    if p["check_ports"]:
        ss = module.get_bin_path("ss")
        if ss:
            rc, out, dummy = module.run_command([ss, "-Hltnp"])
            if rc == 0:
                listeners = vllm_flags.parse_ss_listeners(out)
                pids = _main_pids(module, [i.get("name") for i in instances if i.get("name")])
                problems += vllm_flags.check_ports(instances, listeners, vllm_flags.unit_of_pid, pids)

    result = dict(changed=False, parser_checked=False, missing_models=missing_models)
    valid = [i for i, inst in enumerate(instances) if inst.get("model") and inst.get("name")]
    result["argv"] = dict((instances[i]["name"], vllm_args.instance_argv(instances[i], p["python"], common_args))
                          for i in valid)

    if not p["parser"]:
        result["parser_skipped_reason"] = "parser=false"
    elif not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
        result["parser_skipped_reason"] = "%s does not exist yet (vLLM not installed)" % p["python"]
        if p["require_parser"]:
            problems.append(vllm_flags.problem("python", None, "parser", result["parser_skipped_reason"]))
    elif valid:
        argvs = [vllm_flags.parser_argv(instances[i], common_args) for i in valid]
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
            fmaps = [vllm_flags.flag_map(i, instances[i], common_args) for i in valid]
            parser_problems = vllm_flags.parser_problems(out["results"], fmaps, valid)
            problems += parser_problems
            if key and not parser_problems and not result["parser_cached"] and not module.check_mode:
                cache_write(p["cache_dir"], key, out)

    result["problems"] = problems
    if problems:
        module.fail_json(msg="vLLM options are invalid (nothing was changed):\n%s"
                         % vllm_flags.format_problems(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
