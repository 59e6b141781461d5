# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Playbooks ask roles through documented entry points instead of reaching in.

- no playbook reads a role's private (registered, ``_x``) variable;
- no playbook repeats a role default with ``| default(...)`` (the role's entry
  point sees its defaults);
- no playbook or role runs another role's files by path;
- every ``tasks_from`` a playbook, role or test calls is an entry point in that
  role's meta/argument_specs.yml, and every entry point there has its tasks file;
- the vllm_service warmup hook (roles/vllm_service/files/vllm-warmup.py) is the
  vllm_warmup module_utils code and runs with a bare python (no Ansible);
- the verify role's ``plot`` entry point draws a PNG; the drift entry points
  refuse to run without --check (cheap runs on localhost).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

PLAYBOOKS = sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
                   + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml"))
                   + [os.path.join(ROOT, "site.yml")])
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")) if os.path.isdir(p))

# Prefix of a role's private variables -> role.
PRIVATE_PREFIXES = {"vllm": "vllm_service", "flash_attn": "flash_attn", "gpustack": "gpustack", "gs": "gpustack",
                    "verify": "verify", "gpu_preflight": "gpu_preflight", "gateway": "gateway", "ray": "ray_cluster"}
PRIVATE_RE = re.compile(r"(?<!\w)_(%s)_\w+" % "|".join(sorted(PRIVATE_PREFIXES, key=len, reverse=True)))

# Not converted yet: (playbook, role). Empty: every playbook asks the roles
# through their entry points. A line added here must be removed once its
# playbook is converted (the test fails on a line that is no longer needed).
PENDING_PRIVATE = set()
PENDING_DEFAULTS = set()


def _rel(path):
    return os.path.relpath(path, ROOT)


def _code_lines(path):
    """(line number, text) of a YAML file without its comment lines."""
    with open(path) as fh:
        for num, line in enumerate(fh, 1):
            if not line.lstrip().startswith("#"):
                yield num, line


def _role_defaults():
    """{variable: role} of every roles/*/defaults/main.yml."""
    out = {}
    for role in ROLES:
        path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
        if os.path.exists(path):
            with open(path) as fh:
                for key in yaml.safe_load(fh) or {}:
                    out[key] = role
    return out


def private_reads(paths):
    """{(playbook, role): ['line N: _x', ...]} of role-private variables read in ``paths``."""
    found = {}
    for path in paths:
        for num, line in _code_lines(path):
            for m in PRIVATE_RE.finditer(line):
                found.setdefault((_rel(path), PRIVATE_PREFIXES[m.group(1)]), []).append("line %d: %s" % (num, m.group(0)))
    return found


def default_copies(paths):
    """{(playbook, role): ['line N: var | default(...)']} of role defaults repeated with ``| default()``."""
    defaults = _role_defaults()
    pattern = re.compile(r"(?<![\w.])(%s)\s*\|\s*default\(" % "|".join(sorted(defaults, key=len, reverse=True)))
    found = {}
    for path in paths:
        for num, line in _code_lines(path):
            for m in pattern.finditer(line):
                found.setdefault((_rel(path), defaults[m.group(1)]), []).append("line %d: %s" % (num, m.group(0)))
    return found


def _check(found, pending, what):
    new = {k: v for k, v in found.items() if k not in pending}
    assert not new, ("playbooks %s; call the role's entry point instead (include_role tasks_from, "
                     "docs/drift.md 'Role entry points'): %s" % (what, new))
    stale = sorted(pending - set(found))
    assert not stale, "these playbooks are converted: remove them from the PENDING list of %s: %s" % (__file__, stale)


def test_playbooks_read_no_role_private_variable():
    _check(private_reads(PLAYBOOKS), PENDING_PRIVATE, "read role-private (_x) variables")


def test_playbooks_repeat_no_role_default():
    _check(default_copies(PLAYBOOKS), PENDING_DEFAULTS, "repeat role defaults with | default()")


def test_the_scans_find_what_they_look_for(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("- x: \"{{ _flash_attn_key_id }} {{ hostvars[h]['_gpustack_unit'] }} {{ gpustack_api_port | default(30080) }}\"\n"
                   "# _verify_parsed in a comment is fine\n"
                   "- y: \"{{ drift_rows_gpustack_models }} {{ llmops.serving.gpustack_model }}\"\n")
    assert private_reads([str(bad)]) == {
        (_rel(str(bad)), "flash_attn"): ["line 1: _flash_attn_key_id"],
        (_rel(str(bad)), "gpustack"): ["line 1: _gpustack_unit"]}
    assert default_copies([str(bad)]) == {(_rel(str(bad)), "gpustack"): ["line 1: gpustack_api_port | default("]}


def test_no_playbook_or_role_runs_another_roles_files_by_path():
    offenders = []
    for path in PLAYBOOKS:
        for num, line in _code_lines(path):
            if re.search(r"roles/\w+/(files|templates|tasks|vars|defaults)/|role_path", line):
                offenders.append("%s:%d" % (_rel(path), num))
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "*", "*.yml")):
        for num, line in _code_lines(path):
            if re.search(r"role_path\s*}}\s*/\.\.", line):
                offenders.append("%s:%d" % (_rel(path), num))
    assert not offenders, "ship the file in the role and call the role's entry point: %s" % offenders


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _role_calls():
    """(file, role, tasks_from) of every include_role / import_role / roles: entry with tasks_from."""
    files = PLAYBOOKS + [p for pattern in ("roles/*/tasks/*.yml", "molecule/*/*.yml", "tests/integration/**/*.yml")
                         for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    calls = []
    for path in files:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        for node in _walk(doc):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                spec = node.get(key)
                if isinstance(spec, dict) and spec.get("tasks_from"):
                    calls.append((_rel(path), spec.get("name"), spec["tasks_from"]))
            if "role" in node and node.get("tasks_from"):
                calls.append((_rel(path), node["role"], node["tasks_from"]))
    return calls


def _entry_points(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as fh:
        return set((yaml.safe_load(fh) or {}).get("argument_specs", {}))


def test_every_tasks_from_is_a_documented_entry_point():
    calls = _role_calls()
    assert ("playbooks/drift.yml", "llmops.serving.flash_attn", "drift") in calls
    missing = []
    for path, name, tasks_from in calls:
        role = str(name).replace("llmops.serving.", "")
        if role in ROLES and re.sub(r"\.ya?ml$", "", tasks_from) not in _entry_points(role):
            missing.append("%s: %s tasks_from=%s" % (path, name, tasks_from))
    assert not missing, "add these entry points to the role's meta/argument_specs.yml: %s" % missing


# Entry points that only the collection's own roles and playbooks call (drift.yml,
# decommission.yml, report.yml, vllm.yml, the role's own flow): marked the way
# prometheus-community/ansible's roles/_common marks its entry points, a
# short_description starting "Internal only - " and a first description line
# naming the caller; an input only a caller sets says "Internal only - set by
# the caller". Entry points a user calls (view, plot, gpu_info, recover,
# exporters, controller, models) and main are not marked.
INTERNAL = {
    "flash_attn": {"drift"}, "models": {"drift"}, "gpustack": {"drift", "drift_models"},
    "gateway": {"drift", "drain", "ready", "leftovers", "remove"},
    "monitoring": {"leftovers", "leftovers_exporters", "remove", "remove_exporters"},
    "ray_cluster": {"drift", "status", "nodes_check", "ports", "instance_nodes", "leftovers", "remove"},
    # vllm_service (drift, leftovers, remove) is marked by the plan work (issue 30 item 1), which owns the role.
    # The parts of vllm_service (issue 30: roles of their own, called by vllm_service with internal inputs):
    # every entry point, main included, is internal.
    "vllm_install": {"main", "prune"}, "vllm_watchdog": {"main", "agent"},
    "vllm_compile_cache": {"main", "collect"}, "vllm_rollback": {"main", "snapshot"},
}
INTERNAL_INPUTS = {("gateway", "drain", "gateway_server"), ("gateway", "ready", "gateway_server"),
                   ("ray_cluster", "status", "ray_status_fail")}


def _specs(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as fh:
        return (yaml.safe_load(fh) or {}).get("argument_specs", {})


@pytest.mark.parametrize("role", sorted(INTERNAL))
def test_internal_entry_points_are_marked_internal(role):
    specs = _specs(role)
    for entry, spec in specs.items():
        marked = str(spec.get("short_description", "")).startswith("Internal only - ")
        why = "a user entry point is marked internal" if marked else "mark it internal"
        assert marked == (entry in INTERNAL[role]), "%s %s: %s" % (role, entry, why)
        if marked:
            desc = spec.get("description")
            first = desc[0] if isinstance(desc, list) else desc
            assert str(first).startswith("Internal only: called by "), "%s %s: name the caller first" % (role, entry)
    for r, entry, option in INTERNAL_INPUTS:
        if r == role:
            assert str(specs[entry]["options"][option]["description"]).startswith("Internal only - set by the caller")


def _read(path):
    with open(path) as fh:
        return fh.read()


def test_internal_entry_points_are_called_by_the_collection():
    called = set((str(name).replace("llmops.serving.", ""), re.sub(r"\.ya?ml$", "", t))
                 for path, name, t in _role_calls() if not path.startswith(("molecule/", "tests/")))
    for role, entries in INTERNAL.items():
        for entry in entries:
            own = any(re.search(r"include_tasks: %s\.yml" % entry, _read(path))
                      for path in glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml")))
            assert (role, entry) in called or own, "%s %s is called by nothing in roles/ or playbooks/" % (role, entry)


@pytest.mark.parametrize("role", ROLES)
def test_every_entry_point_has_its_tasks_file(role):
    for entry in _entry_points(role):
        assert os.path.exists(os.path.join(ROOT, "roles", role, "tasks", entry + ".yml")), (role, entry)


WARMUP_HOOK = os.path.join(ROOT, "roles", "vllm_service", "files", "vllm-warmup.py")
WARMUP_CODE = os.path.join(ROOT, "plugins", "module_utils", "vllm_warmup.py")


def test_warmup_hook_is_the_module_utils_code():
    # One mechanism: the role file is a link to the module_utils file (ansible-galaxy
    # keeps links inside the collection; the copy module copies the target's content).
    assert os.path.islink(WARMUP_HOOK), "%s must be a symlink to %s" % (_rel(WARMUP_HOOK), _rel(WARMUP_CODE))
    assert os.path.realpath(WARMUP_HOOK) == os.path.realpath(WARMUP_CODE)
    with open(WARMUP_HOOK, "rb") as a, open(WARMUP_CODE, "rb") as b:
        assert a.read() == b.read()


def test_warmup_hook_runs_with_a_bare_python():
    with open(WARMUP_HOOK) as fh:
        source = fh.read()
    assert not re.search(r"^\s*(from|import)\s+ansible", source, re.M), "the hook runs on hosts without Ansible"
    # -I -S: no site-packages (no Ansible, no requests), as on a host with only the venv's python.
    proc = subprocess.run([sys.executable, "-I", "-S", WARMUP_HOOK, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--url" in proc.stdout


def test_watchdog_runs_from_the_files_the_role_ships(tmp_path):
    """The watchdog runs on the host from what vllm_watchdog's tasks/main.yml writes into
    {{ vllm_install_dir }}/bin (no Ansible there; the files are named in
    vllm_service's vars/main.yml as _vllm_watchdog_set_files and handed to
    vllm_watchdog as _vllm_watchdog_scripts): every module_utils file it
    imports must be shipped beside it (a missing one broke it once: vllm_client
    had started to import the systemd parser)."""
    with open(os.path.join(ROOT, "roles", "vllm_watchdog", "tasks", "main.yml")) as fh:
        task = [t for t in yaml.safe_load(fh) if "llmops.serving.file_set" in t][0]
    assert "_vllm_watchdog_scripts" in task["vars"]["_vllm_watchdog_files_all"]
    with open(os.path.join(ROOT, "roles", "vllm_service", "tasks", "finish.yml")) as fh:
        call = [t for t in yaml.safe_load(fh) if "ansible.builtin.import_role" in t
                and t["ansible.builtin.import_role"]["name"] == "llmops.serving.vllm_watchdog"][0]
    assert call["vars"]["_vllm_watchdog_scripts"] == "{{ _vllm_watchdog_set_files }}"
    with open(os.path.join(ROOT, "roles", "vllm_service", "vars", "main.yml")) as fh:
        files = yaml.safe_load(fh)["_vllm_watchdog_set_files"]
    lookup = re.compile(r"lookup\('ansible\.builtin\.file', '([^']+)', rstrip=false\)")
    for item in [f for f in files if lookup.search(f["content"])]:
        src = os.path.join(ROOT, "roles", "vllm_service", "files", lookup.search(item["content"]).group(1))
        # follows the link, as the file lookup does
        shutil.copy(src, str(tmp_path / os.path.basename(item["path"])))
    proc = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "vllm-watchdog.py"), "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--instance" in proc.stdout


def _playbook(tmp_path, tasks, *args):
    exe = shutil.which("ansible-playbook") or os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if not os.path.exists(exe):
        pytest.skip("ansible-playbook not found")
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "entry point", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections") + os.pathsep
               + os.environ.get("ANSIBLE_COLLECTIONS_PATH", ""))
    return subprocess.run([exe, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(play)] + list(args), capture_output=True, text=True, env=env, timeout=300, check=False)


def test_verify_plot_entry_point_draws_the_png(tmp_path):
    pytest.importorskip("matplotlib")
    data = {"title": "t", "x_label": "concurrency",
            "series": [{"label": "results", "points": [{"x": 1, "output_throughput": 10.0, "ttft_p99_ms": 50.0},
                                                       {"x": 4, "output_throughput": 30.0, "ttft_p99_ms": 90.0}]}]}
    proc = _playbook(tmp_path, [{"ansible.builtin.include_role": {"name": "llmops.serving.verify", "tasks_from": "plot"},
                                 "vars": {"verify_plot_data": data, "verify_plot_file": str(tmp_path / "p.png"),
                                          "verify_plot_python": sys.executable}}])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "plot-data.json").exists()


def test_verify_plot_entry_point_names_a_missing_option(tmp_path):
    proc = _playbook(tmp_path, [{"ansible.builtin.include_role": {"name": "llmops.serving.verify", "tasks_from": "plot"}}])
    assert proc.returncode != 0
    assert re.search(r"missing required arguments: verify_plot_data, verify_plot_file", proc.stdout), proc.stdout[-3000:]


@pytest.mark.parametrize("role,entry", [("flash_attn", "drift"), ("gateway", "drift"), ("gpustack", "drift"),
                                        ("gpustack", "drift_models"), ("ray_cluster", "drift")])
def test_drift_entry_points_refuse_to_run_without_check(tmp_path, role, entry):
    proc = _playbook(tmp_path, [{"ansible.builtin.include_role": {"name": "llmops.serving." + role, "tasks_from": entry}}])
    assert proc.returncode != 0
    # Whitespace-normalised: ansible-core before 2.19 wraps the YAML callback's long messages.
    assert "tasks_from=%s only reads: run the playbook with --check" % entry in " ".join(proc.stdout.split()), \
        proc.stdout[-3000:]


# Entry points with a required input that only the caller sets.
REQUIRED_INPUTS = {("verify", "plot"): {"verify_plot_data": {}, "verify_plot_file": "/nonexistent/p.png"},
                   ("vllm_service", "restart"): {"vllm_restart_instance": "a"}}


def test_every_entry_point_validates_with_the_role_defaults(tmp_path):
    # Only the argument validation runs (it is tagged `always`; --tags selects nothing
    # else), so nothing is installed on this machine. A spec whose values cannot
    # be templated with the role defaults alone (a default that names a variable
    # only the caller sets) fails here instead of in the first real run.
    calls = [(role, entry) for role in ROLES for entry in sorted(_entry_points(role))]
    tasks = [{"name": "%s %s" % call, "ansible.builtin.include_role": {"name": "llmops.serving." + call[0], "tasks_from": call[1]},
              "tags": ["always"], "ignore_errors": True,
              "vars": REQUIRED_INPUTS.get(call, {})}
             for call in calls]
    proc = _playbook(tmp_path, tasks, "--tags", "llmops_validation_only")
    validated = re.findall(r"Validating arguments against arg spec '([a-z_]+)'.*\n(ok|fatal|skipping)", proc.stdout)
    assert len(validated) == len(calls) and set(r for dummy, r in validated) == {"ok"}, proc.stdout[-4000:]
