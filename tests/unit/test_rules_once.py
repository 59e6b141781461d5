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
import ast
import glob
import os
import re
import shutil
import subprocess
import sys

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


# --- the env file: one reader, one spelling of the key's variable ---------------------------------------------

ENV_FILE = os.path.join("plugins", "module_utils", "vllm_env_file.py")
LINE_PARSE = re.compile(r"partition\([\"']=[\"']\)|startswith\(\w+ \+ [\"']=[\"']\)|split\([\"']=[\"'], *1\)")


def _py_sources():
    """(relative path, text) of every Python file the collection has or ships (symlinks: their source)."""
    for rel in _files(("py",)):
        with open(os.path.join(ROOT, rel)) as f:
            yield rel, f.read()


def _string_constants(text):
    """The string literals of a Python file, docstrings left out (they explain, they do not spell)."""
    tree = ast.parse(text)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
                docs.add(id(first.value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                for t in node.targets):
            docs.add(id(node.value))  # plugin documentation
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_one_env_file_reader():
    """Only vllm_env_file.py parses the env file's lines for the key (vllm_client.py on the controller and
    with the watchdog, the monitoring probe on the host import it)."""
    readers = []
    for rel, text in _py_sources():
        if rel == ENV_FILE:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                src = ast.get_source_segment(text, node)
                if LINE_PARSE.search(src) and re.search(r"API_KEY|env_path|env_file", src):
                    readers.append("%s: %s()" % (rel, node.name))
    assert readers == [], "env-file readers besides %s: %s" % (ENV_FILE, readers)


def test_the_probe_and_the_watchdog_client_ship_the_reader_beside_them():
    for role, consumer in (("monitoring", "vllm_probe.py"), ("vllm_service", "vllm_client.py")):
        shipped = os.path.join(ROOT, "roles", role, "files", "vllm_env_file.py")
        assert os.path.realpath(shipped) == os.path.join(ROOT, ENV_FILE), (role, "ships its own reader copy")
        with open(os.path.join(ROOT, "roles", role, "files", consumer)) as f:
            assert "import vllm_env_file" in f.read(), consumer


def test_the_shipped_scripts_read_the_key_with_the_reader_beside_them(tmp_path):
    """As on a host: the probe and the watchdog's client in a directory with the files their role installs
    beside them, no collection on the path (python -I); both read the key the env template writes."""
    env = tmp_path / "a.env"
    env.write_text('# Environment of vllm@a\nHF_HUB_OFFLINE="1"\nVLLM_API_KEY="s3cr\\"et\\\\x"\n')
    for name, files, call in (
            ("probe", [("roles/monitoring/files", "vllm_probe.py"), ("roles/monitoring/files", "vllm_env_file.py")],
             "import vllm_probe as m; print(m.read_api_key(%r))"),
            ("client", [("roles/vllm_service/files", "vllm_client.py"), ("roles/vllm_service/files", "systemd.py"),
                        ("roles/vllm_service/files", "vllm_env_file.py")],
             "import vllm_client as m; print(m.read_env_file_key(%r))")):
        d = tmp_path / name
        d.mkdir()
        for folder, f in files:
            shutil.copy(os.path.join(ROOT, folder, f), str(d / f))
        out = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); " % str(d)
                              + call % str(env)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout == 's3cr"et\\x\n', (name, out.stdout)


def test_api_key_variable_is_spelled_once():
    """VLLM_API_KEY: one constant in Python (vllm_env_file.API_KEY_ENV), at most once per template."""
    spelled = [rel for rel, text in _py_sources()
               if rel != ENV_FILE and any("VLLM_API_KEY" in s for s in _string_constants(text))]
    assert spelled == [], "VLLM_API_KEY spelled in Python outside %s: %s" % (ENV_FILE, spelled)
    for rel in _files(("j2",)):
        with open(os.path.join(ROOT, rel)) as f:
            text = f.read()
        assert text.count("VLLM_API_KEY") <= 1, rel


# --- ports: one rule ----------------------------------------------------------------------------------------

PORTS = os.path.join("plugins", "module_utils", "ports.py")
PORT_COMPARE = re.compile(r"[<>]=?\s*6553[56]\b|\b(0|1|1024|MIN_PORT)\s*<=?\s*\w*port|\w*port\w*\s*<\s*6553")


def test_one_port_range_check():
    """Only module_utils/ports.py compares a port with its bounds (the range of each kind of port is decided
    there); every checker calls ports.problem."""
    hits = []
    for rel, text in _py_sources():
        if rel == PORTS:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if PORT_COMPARE.search(line) and not line.lstrip().startswith("#"):
                hits.append("%s:%d: %s" % (rel, n, line.strip()))
    assert hits == [], "port range checks outside %s:\n%s" % (PORTS, "\n".join(hits))
