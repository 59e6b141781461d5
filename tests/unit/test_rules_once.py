# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Issue 30 item 3, each rule once: structure checks that keep it so.

- Instance paths: the instance view (module_utils/vllm_instance/view.py
  ``instance_paths``) is the one place that builds an instance's unit name,
  drop-in, env file, state/cache directory, watchdog names and snapshot
  paths; every task, template, filter and module reads them from the view
  (or from the filter ``vllm_instance_paths`` for names the view no longer
  lists). A line elsewhere that glues a known prefix to an instance name fails here.
"""
import glob
import os
import re

from conftest import ROOT

VIEW = os.path.join("plugins", "module_utils", "vllm_instance", "view.py")

# Python: a unit name or instance path formatted from a name.
PY_PATTERNS = [re.compile(p) for p in (
    r"vllm(-watchdog)?@%s",
    r"[\"']vllm(-watchdog)?@[\"']\s*\+",
    r"%s\.env[\"']",
    r"10-instance\.conf[\"']\s*%",
)]
# YAML / Jinja: a path or unit glued together from an instance name.
YAML_PATTERNS = [re.compile(p) for p in (
    # vllm@{{ name }}.service, vllm-watchdog@{{ item.name }}.timer as a unit or path (messages and labels aside)
    r"^\s*(-\s*)?(name|path|dest|src|argv|label)?:?.*?(?<![\w ])vllm(-watchdog)?@\{\{",
    r"'vllm(-watchdog)?@'\s*~",
    r"regex_replace'?,?\s*\(?'\^', *[^)]*(vllm_unit_dir|vllm_config_dir|vllm_home|vllm_rollback_dir|vllm@|vllm-watchdog@"
    r"|/var/lib/vllm)",
    r"regex_replace'?,?\s*\(?'\$', *'(\.env|\.service[^']*|\.timer|\.json)'",
    r"vllm_config_dir\s*}}/\{\{",
    r"vllm_unit_dir\s*}}/vllm(-watchdog)?@\{\{",
    r"vllm_rollback_dir\s*}}/\{\{\s*item",
)]
# Lines that name an instance's unit for a person (a message, a task label), not a path or unit argument.
MESSAGE = re.compile(r"^\s*(label|msg):|^\s+(vllm@\{\{ r\.item \}\}: cause|Journal of vllm@)")
# Host-side code that names the unit from the instance name it is given (left for the host-check rework,
# issue 30 item 3's "the host check takes the view only"); each with the reason.
ALLOWED = {
    os.path.join("plugins", "module_utils", "vllm_watchdog.py"): "the watchdog script on the host: --instance NAME",
    os.path.join("plugins", "module_utils", "vllm_sleep.py"): "a message naming vllm@NAME",
}


def _files(exts):
    for top in ("roles", "plugins", "playbooks"):
        for ext in exts:
            for path in glob.glob(os.path.join(ROOT, top, "**", "*." + ext), recursive=True):
                if not os.path.islink(path):  # a file shipped to hosts: its module_utils source is checked
                    yield os.path.relpath(path, ROOT)


def _hits():
    hits = []
    for rel in _files(("py",)):
        if rel == VIEW or rel in ALLOWED:
            continue
        with open(os.path.join(ROOT, rel)) as f:
            for n, line in enumerate(f, 1):
                if line.lstrip().startswith("#"):
                    continue
                if any(p.search(line) for p in PY_PATTERNS):
                    hits.append("%s:%d: %s" % (rel, n, line.strip()))
    for rel in _files(("yml", "j2")):
        if rel.startswith(os.path.join("plugins", "filter")):
            continue  # filter docs (examples)
        with open(os.path.join(ROOT, rel)) as f:
            for n, line in enumerate(f, 1):
                if line.lstrip().startswith("#") or MESSAGE.search(line):
                    continue
                if any(p.search(line) for p in YAML_PATTERNS):
                    hits.append("%s:%d: %s" % (rel, n, line.strip()))
    return hits


def test_no_instance_path_is_built_outside_the_view():
    hits = _hits()
    assert hits == [], ("instance paths built outside module_utils/vllm_instance/view.py (read them from the view, "
                        "or vllm_instance_paths for names it does not list):\n" + "\n".join(hits))
