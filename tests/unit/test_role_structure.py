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
