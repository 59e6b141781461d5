# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vllm_service's preflight as one rule (module_utils/vllm_instance/preflight.py,
filter vllm_preflight_problems): the role's defaults pass; each setting that
cannot work gives the message the role's asserts gave before the rule moved
to Python (tasks/preflight.yml at 2df052b), naming the variable and the fix;
every problem is returned at once, in the order the role checked them.
And vllm_model_stats on the real host-state captures of tests/fixtures/plan."""
import json
import os

import pytest
import yaml

from conftest import FIXTURES, ROOT

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import preflight_problems
from ansible_collections.llmops.serving.plugins.filter.vllm_host_state import vllm_model_stats
from ansible_collections.llmops.serving.plugins.filter.vllm_instance import vllm_preflight_problems


def _defaults():
    with open(os.path.join(ROOT, "roles", "vllm_service", "defaults", "main.yml")) as fh:
        d = yaml.safe_load(fh)
    return {"host": "h1", "engine_ready_timeout": d["vllm_engine_ready_timeout"],
            "start_timeout_margin": d["vllm_start_timeout_margin"], "watchdog": d["vllm_watchdog"],
            "watchdog_interval": d["vllm_watchdog_interval"], "watchdog_failures": d["vllm_watchdog_failures"],
            "watchdog_max_restarts_per_hour": d["vllm_watchdog_max_restarts_per_hour"],
            "watchdog_probe_timeout": d["vllm_watchdog_probe_timeout"],
            "watchdog_revive_max_per_hour": d["vllm_watchdog_revive_max_per_hour"],
            "watchdog_revive_backoff": d["vllm_watchdog_revive_backoff"],
            "watchdog_revive_backoff_max": d["vllm_watchdog_revive_backoff_max"],
            "inherit_packages": d["vllm_venv_inherit_packages"], "python": d["vllm_python"],
            "venvs_dir": d["vllm_venvs_dir"], "venv": d["vllm_venv"], "device": "cpu", "configured_device": "auto",
            "agent_problems": [], "view": [{"name": "a", "device_problems": []}], "shutdown_flags": []}


def test_the_role_defaults_pass():
    assert preflight_problems(_defaults()) == []


def test_the_timeouts():
    for bad in ({"engine_ready_timeout": 0}, {"start_timeout_margin": 29}, {"engine_ready_timeout": "x"}):
        s = dict(_defaults(), **bad)
        assert preflight_problems(s) == [
            "vllm_engine_ready_timeout must be > 0 and vllm_start_timeout_margin >= 30 s "
            "(TimeoutStartSec = engine-ready timeout + margin)."], bad
    assert preflight_problems(dict(_defaults(), start_timeout_margin=30, engine_ready_timeout="600")) == []


@pytest.mark.parametrize("key,value", [("watchdog_interval", 4), ("watchdog_failures", 0), ("watchdog_probe_timeout", 0),
                                       ("watchdog_max_restarts_per_hour", -1), ("watchdog_revive_max_per_hour", -1),
                                       ("watchdog_revive_backoff", -1), ("watchdog_revive_backoff_max", 1)])
def test_the_watchdog_numbers(key, value):
    s = dict(_defaults(), **{key: value})
    (msg,) = preflight_problems(s)
    assert msg.startswith("vllm_watchdog_interval must be >= 5 s, vllm_watchdog_failures >= 1, vllm_watchdog_probe_timeout"
                          " >= 1 s, vllm_watchdog_max_restarts_per_hour, vllm_watchdog_revive_max_per_hour and "
                          "vllm_watchdog_revive_backoff >= 0, and vllm_watchdog_revive_backoff_max >= "
                          "vllm_watchdog_revive_backoff (got "), msg
    got = [s["watchdog_interval"], s["watchdog_failures"], s["watchdog_probe_timeout"],
           s["watchdog_max_restarts_per_hour"], s["watchdog_revive_max_per_hour"], s["watchdog_revive_backoff"],
           s["watchdog_revive_backoff_max"]]
    assert msg.endswith("(got %s)." % ", ".join(str(g) for g in got)), msg
    # The watchdog off: its numbers are not used, not checked.
    assert preflight_problems(dict(s, watchdog=False)) == []


def test_an_inherited_interpreter_inside_a_managed_venv():
    s = dict(_defaults(), inherit_packages=True, python="/opt/vllm/venvs/vllm-0.25.1-inherit-x/bin/python", venvs_dir="/opt/vllm/venvs")
    assert preflight_problems(s) == [
        "vllm_venv_inherit_packages is true and vllm_python (/opt/vllm/venvs/vllm-0.25.1-inherit-x/bin/python) is in a "
        "venv this role manages (/opt/vllm/venvs, pruned after each switch): point vllm_python at the image's own "
        "interpreter (e.g. /opt/torch/.venv/bin/python3 or /usr/bin/python3). Nothing was changed."]
    assert preflight_problems(dict(s, python="/opt/vllm/venv/bin/python", venv="/opt/vllm/venv"))
    # The image's own interpreter, a path that only starts like a managed one, or no inheriting: fine.
    assert preflight_problems(dict(s, python="/opt/torch/.venv/bin/python3")) == []
    assert preflight_problems(dict(s, python="/opt/vllm/venvs2/bin/python")) == []
    assert preflight_problems(dict(s, inherit_packages=False)) == []


def test_the_device_the_agent_the_gpus_and_shutdown_timeout_all_at_once_in_order():
    s = dict(_defaults(), device="mig", configured_device="mig", engine_ready_timeout=0,
             agent_problems=["vllm_gateway_agent_port 80 is below 1024"],
             view=[{"name": "a", "device_problems": ["instance a: /dev/nvidia3 (GPU 3) does not exist."]},
                   {"name": "b"}],
             shutdown_flags=["vllm_common_args"])
    assert preflight_problems(s) == [
        "vllm_engine_ready_timeout must be > 0 and vllm_start_timeout_margin >= 30 s "
        "(TimeoutStartSec = engine-ready timeout + margin).",
        "vllm_device must be auto, cuda or cpu (got mig).",
        "vllm_gateway_agent_port 80 is below 1024",
        "instance a: /dev/nvidia3 (GPU 3) does not exist.",
        "vllm_common_args on h1 set shutdown_timeout: set vllm_shutdown_timeout instead (it renders --shutdown-timeout "
        "and sizes the unit's TimeoutStopSec). Nothing was changed."]


def test_the_filter_refuses_what_is_not_the_settings():
    with pytest.raises(AnsibleFilterError, match="vllm_preflight_problems expects the settings dict"):
        vllm_preflight_problems(["x"])


@pytest.mark.parametrize("capture,exists", [("converged", True), ("fresh", False)])
def test_model_stats_on_real_host_state_captures(capture, exists):
    with open(os.path.join(FIXTURES, "plan", capture + ".json")) as fh:
        data = json.load(fh)
    stats = vllm_model_stats(data["view"], data["state"]["files"])
    assert [(r["item"]["name"], r["item"]["model"], r["stat"]["exists"]) for r in stats] == \
        [(v["name"], v["model"], exists) for v in data["view"]]
    # A hub id is no host path; a model the host state did not stat is left out (nothing to say about it).
    view = data["view"] + [dict(data["view"][0], name="hub", model="Qwen/Qwen2.5-0.5B"),
                           dict(data["view"][0], name="unread", model="/srv/models/other")]
    assert [r["item"]["name"] for r in vllm_model_stats(view, data["state"]["files"])] == [v["name"] for v in data["view"]]
    with pytest.raises(AnsibleFilterError):
        vllm_model_stats(data["view"], [])
