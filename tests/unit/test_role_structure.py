# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Every role has the house structure:

- ``meta/argument_specs.yml`` with a ``main`` entry point that lists every
  variable of ``defaults/main.yml`` (so ``ansible-doc -t role`` and the
  argument validation know them all), and no option with a ``default`` that
  defaults/main.yml lacks (a typo'd or removed variable; an option without a
  default, like a host's vllm_node_address, is the inventory's to set);
- every tasks file that says it is an entry point (``# Entry point `X```) is
  listed there;
- ``handlers/main.yml`` defining every handler its tasks notify;
- ``docs/<role>.md``.
"""
import glob
import os
import re

import pytest
import yaml

from conftest import ROOT

ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p))


def _yaml(*parts):
    path = os.path.join(ROOT, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return yaml.safe_load(fh)


def _specs(role):
    return (_yaml("roles", role, "meta", "argument_specs.yml") or {}).get("argument_specs") or {}


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        nested = [k for k in ("block", "rescue", "always") if k in node]
        for key in nested:
            yield from _tasks(node[key])
        if not nested:
            yield node


def _notified(role):
    out = set()
    for path in glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml")):
        with open(path) as fh:
            for task in _tasks(yaml.safe_load(fh) or []):
                notify = task.get("notify")
                out.update([notify] if isinstance(notify, str) else (notify or []))
    return out


def _handler_names(role):
    names = set()
    for task in _tasks(_yaml("roles", role, "handlers", "main.yml") or []):
        names.add(task.get("name"))
        listen = task.get("listen")
        names.update([listen] if isinstance(listen, str) else (listen or []))
    return names


@pytest.mark.parametrize("role", ROLES)
def test_main_entry_point_lists_every_default(role):
    specs = _specs(role)
    assert "main" in specs, "roles/%s/meta/argument_specs.yml has no `main` entry point" % role
    defaults = set(_yaml("roles", role, "defaults", "main.yml") or {})
    options = specs["main"].get("options") or {}
    missing = sorted(defaults - set(options))
    assert not missing, ("roles/%s/meta/argument_specs.yml (main) does not document these defaults/main.yml "
                         "variables: %s" % (role, ", ".join(missing)))
    unknown = sorted(k for k, v in options.items() if k not in defaults and "default" in (v or {}))
    assert not unknown, ("roles/%s/meta/argument_specs.yml (main) gives a default to options that "
                         "defaults/main.yml does not have: %s" % (role, ", ".join(unknown)))


@pytest.mark.parametrize("role", ROLES)
def test_every_declared_entry_point_is_in_argument_specs(role):
    specs = _specs(role)
    missing = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml"))):
        with open(path) as fh:
            head = fh.read(2000)
        m = re.search(r"^# Entry point `([a-z_]+)`", head, re.M)
        if m and m.group(1) not in specs:
            missing.append("%s (%s)" % (m.group(1), os.path.relpath(path, ROOT)))
    assert not missing, "roles/%s/meta/argument_specs.yml lacks entry points: %s" % (role, ", ".join(missing))


@pytest.mark.parametrize("role", ROLES)
def test_every_notified_handler_exists(role):
    notified = _notified(role)
    if not notified:
        return
    assert os.path.exists(os.path.join(ROOT, "roles", role, "handlers", "main.yml")), \
        "roles/%s notifies %s but has no handlers/main.yml" % (role, sorted(notified))
    missing = sorted(notified - _handler_names(role))
    assert not missing, "roles/%s/handlers/main.yml has no handler (name or listen) for: %s" % (role, missing)


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_its_docs_page(role):
    assert os.path.exists(os.path.join(ROOT, "docs", role + ".md")), "docs/%s.md is missing" % role


def _private_prefixes(role):
    return ("_%s_" % role, "_%s_" % role.split("_")[0])


def _names_a_role_binds(role):
    """(file, kind, name) of every variable a role's tasks and handlers bind: task
    and block vars, loop variables, set_fact keys and registered results."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml"))
                       + glob.glob(os.path.join(ROOT, "roles", role, "handlers", "*.yml"))):
        with open(path) as fh:
            stack = list(yaml.safe_load(fh) or [])
        while stack:
            node = stack.pop()
            if not isinstance(node, dict):
                continue
            for key in ("block", "rescue", "always"):
                stack.extend(node.get(key) or [])
            name = os.path.relpath(path, ROOT)
            out += [(name, "vars", v) for v in (node.get("vars") or {})]
            loop_var = (node.get("loop_control") or {}).get("loop_var")
            out += [(name, "loop_var", loop_var)] if loop_var else []
            facts = node.get("ansible.builtin.set_fact") or node.get("set_fact") or {}
            out += [(name, "set_fact", v) for v in facts if isinstance(facts, dict) and v != "cacheable"]
            out += [(name, "register", node["register"])] if node.get("register") else []
    return out


@pytest.mark.parametrize("role", ROLES)
def test_private_variables_carry_the_role_prefix(role):
    """A role's own variables are named _ROLE_...: a play's registered variables
    and set_facts outrank task vars, so a generic name (``_files``) lets any
    playbook that registered ``_files`` swap a role's value (it did: the watchdog's
    file list in molecule/vllm_production's side effect)."""
    wrong = sorted({"%s: %s %s" % (f, kind, name) for f, kind, name in _names_a_role_binds(role)
                    if name.startswith("_") and not name.startswith(_private_prefixes(role))})
    assert not wrong, "name these with the role's prefix %s:\n%s" % (_private_prefixes(role)[-1], "\n".join(wrong))
