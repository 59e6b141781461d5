# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Secrets stay out of logs: a static check of every role and playbook.

- every role option named like a secret (vllm_instance.is_secret_name, plurals
  too) is declared ``no_log: true`` in its meta/argument_specs.yml, unless it
  is listed in NOT_SECRET with the reason (a path, a name, a switch);
- every task (blocks, handlers and playbooks included) that uses one of those
  options' values in a template expression - its module arguments, its vars,
  its loop or label; conditions only test it and are not looked at - has
  ``no_log`` set (``true`` or a template that decides per item), or passes it
  only to options that the collection's module itself declares ``no_log``
  (Ansible then masks the value in everything the task prints, and the
  module's errors stay readable);
- a task that reads a secret file on the controller (``lookup('file', ...)``
  of a key path) has ``no_log: true`` and ``diff: false``;
- a file the roles write from a secret (copy/template with ``no_log``) is
  root-owned, 0600 or 0640, and written with ``diff: false``.

Indirection (a secret passed through a role var such as
vllm_service's ``_vllm_view_settings``) is not followed: those vars are
checked where the secret is finally written (tests of the filters/templates).
"""
import glob
import importlib
import os
import re

import pytest
import yaml

from conftest import ROOT, module_argument_spec

from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import is_secret_name

ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p))

# Options named like a secret that hold none: option -> why.
NOT_SECRET = {
    "gateway_require_api_key": "a switch",
    "gateway_api_key_headers": "the names of the request headers a key is read from, not a key",
    "gateway_tls_key": "a path on the controller; the task that reads the file is checked (SECRET_FILES)",
    "gpustack_api_key_name": "the key's name in GPUStack, not the key",
    "gpustack_manage_api_key": "a switch",
    "gateway_api_key_limits": "numbers (requests, concurrent, tokens, period) for gateway_api_key, not a key",
    "gateway_api_key_name": "the name gateway_api_key's usage is labelled with in the metrics, not the key",
}
# Options naming a secret file on the controller (its content is the secret).
SECRET_FILES = ("gateway_tls_key",)
# Keys of a task that only test values (their result is a boolean, never shown).
CONDITIONS = ("name", "when", "changed_when", "failed_when", "until", "no_log", "tags", "that", "quiet")
EXPR_RE = re.compile(r"{{.*?}}|{%.*?%}", re.S)


def _is_secret_option(name):
    # A dict of keys is a secret too (vllm_api_keys, gateway_api_keys); max_tokens is not.
    return is_secret_name(re.sub(r"(?i)keys\b", "key", name))


_NO_LOG_OPTIONS = {}


def _module_no_log_options(fqcn):
    """Options the collection's module declares no_log (empty for other modules)."""
    if not fqcn.startswith("llmops.serving."):
        return set()
    if fqcn not in _NO_LOG_OPTIONS:
        _NO_LOG_OPTIONS[fqcn] = _read_no_log_options(fqcn)
    return _NO_LOG_OPTIONS[fqcn]


def _read_no_log_options(fqcn):
    mod = importlib.import_module("ansible_collections.llmops.serving.plugins.modules.%s" % fqcn.split(".")[2])
    seen = module_argument_spec(mod)
    return set(k for k, v in seen.items() if v.get("no_log"))


def _argument_specs(role):
    path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return (yaml.safe_load(fh) or {}).get("argument_specs") or {}


def _options():
    """{option: (role, spec)} of every entry point of every role."""
    out = {}
    for role in ROLES:
        for entry in _argument_specs(role).values():
            for name, spec in (entry.get("options") or {}).items():
                out.setdefault(name, (role, spec or {}))
    return out


def _secret_options():
    return sorted(n for n, (dummy, spec) in _options().items() if spec.get("no_log") is True)


def _task_files():
    files = []
    for role in ROLES:
        for sub in ("tasks", "handlers"):
            files += glob.glob(os.path.join(ROOT, "roles", role, sub, "*.yml"))
    files += glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml"))
    return sorted(files)


def _tasks(node):
    """Every task of a tasks file or playbook, blocks and plays unfolded."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        nested = [k for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers") if k in node]
        if nested:
            for key in nested:
                yield from _tasks(node[key])
        else:
            yield node


def _strings(value):
    if isinstance(value, dict):
        for sub in value.values():
            yield from _strings(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub)
    elif isinstance(value, str):
        yield value


def _module(task):
    known = set(CONDITIONS) | {"args", "vars", "loop", "loop_control", "register", "delegate_to", "become", "run_once",
                               "check_mode", "diff", "notify", "listen", "environment", "ignore_errors", "retries",
                               "delay", "with_items", "any_errors_fatal", "become_user", "throttle"}
    mods = [k for k in task if k not in known]
    return mods[0] if mods else None


# A use that yields a boolean or a count, not the value.
_TEST_USE = r"(?:\s+is\s+|\s*\|\s*(?:length|bool)\b|\.changed\b)"


def _templated(value, names):
    found = set()
    for text in _strings(value):
        for expr in EXPR_RE.findall(text):
            for name in names:
                if re.search(r"(?<![\w.])%s(?!\w)(?!%s)" % (re.escape(name), _TEST_USE), expr):
                    found.add(name)
    return found


def _derived(names):
    """Facts set and results registered by tasks that template a secret (or
    such a fact) where the module does not mask it: they hold the secret, or
    what is derived from it, too. Followed until nothing new is found."""
    names = set(names)
    tasks = list(_all_tasks())
    while True:
        new = set()
        for dummy, task in tasks:
            if not _uses(task, sorted(names)):
                continue
            mod = _module(task)
            if mod in ("ansible.builtin.set_fact", "set_fact") and isinstance(task[mod], dict):
                new.update(k for k in task[mod] if k != "cacheable")
            if task.get("register"):
                new.add(task["register"])
        if new <= names:
            return names
        names |= new


def _uses(task, names):
    """Secret options whose value a task templates outside its conditions and
    outside module options that the module declares no_log."""
    mod = _module(task)
    masked = _module_no_log_options(mod) if mod else set()
    rest = dict((k, v) for k, v in task.items() if k not in CONDITIONS)
    if mod and isinstance(task[mod], dict):
        rest[mod] = dict((k, v) for k, v in task[mod].items() if k not in masked and k not in CONDITIONS)
    return _templated(rest, names)


def _all_tasks():
    for path in _task_files():
        with open(path) as fh:
            data = yaml.safe_load(fh)
        for task in _tasks(data or []):
            yield os.path.relpath(path, ROOT), task


def test_secret_named_options_are_no_log():
    bad = []
    for name, (role, spec) in sorted(_options().items()):
        if _is_secret_option(name) and name not in NOT_SECRET and spec.get("no_log") is not True:
            bad.append("roles/%s/meta/argument_specs.yml: %s (type %s) is named like a secret: add no_log: true, "
                       "or list it in NOT_SECRET with the reason" % (role, name, spec.get("type", "str")))
    assert not bad, "\n".join(bad)


def test_not_secret_entries_are_still_needed():
    options = _options()
    assert [n for n in NOT_SECRET if n not in options or not _is_secret_option(n)] == []


def test_tasks_that_template_a_secret_are_no_log():
    names = _secret_options()
    assert {"vllm_api_key", "gateway_api_keys", "models_hf_token"} <= set(names)
    names = sorted(_derived(names))
    assert {"_gateway_key_lines", "_gateway_keys_result"} <= set(names)
    bad = []
    for path, task in _all_tasks():
        used = _uses(task, names)
        if used and task.get("no_log") in (None, False, "false", "False"):
            bad.append("%s: task %r templates %s: add no_log: true" % (path, task.get("name"), ", ".join(sorted(used))))
    assert not bad, "\n".join(bad)


def test_tasks_that_read_a_secret_file_are_no_log_without_diff():
    bad = []
    for path, task in _all_tasks():
        text = " ".join(_strings({k: v for k, v in task.items() if k not in CONDITIONS}))
        for name in SECRET_FILES:
            if re.search(r"lookup\([^)]*\b%s\b" % name, text) or (_module(task) in ("ansible.builtin.slurp", "slurp")
                                                                  and name in text):
                if task.get("no_log") is not True or task.get("diff") is not False:
                    bad.append("%s: task %r reads the secret file %s: set no_log: true and diff: false"
                               % (path, task.get("name"), name))
    assert not bad, "\n".join(bad)


WRITERS = ("ansible.builtin.copy", "ansible.builtin.template", "copy", "template")


def test_secret_files_are_root_only_and_never_diffed():
    """A copy/template task marked no_log writes a secret: root-owned (on the controller,
    delegate_to localhost with become false: the controller user's), 0600/0640, diff: false."""
    bad = []
    for path, task in _all_tasks():
        mod = _module(task)
        if mod not in WRITERS or task.get("no_log") is not True:
            continue
        args = task[mod] if isinstance(task[mod], dict) else {}
        problems = []
        on_controller = task.get("delegate_to") == "localhost" and task.get("become") is False
        if str(args.get("owner", "")) != "root" and not (on_controller and "owner" not in args):
            problems.append("owner %r (want root)" % args.get("owner"))
        if str(args.get("mode", "")) not in ("0600", "0640"):
            problems.append("mode %r (want 0600 or 0640)" % args.get("mode"))
        if task.get("diff") is not False:
            problems.append("no diff: false")
        if problems:
            bad.append("%s: task %r: %s" % (path, task.get("name"), "; ".join(problems)))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("role", ["models", "gateway", "ray_cluster", "wheelhouse"])
def test_the_new_roles_are_covered(role):
    """The roles added last are read by the checks above (their task files parse to tasks)."""
    paths = [p for p, dummy in _all_tasks() if p.startswith("roles/%s/" % role)]
    assert paths, role
