"""The gateway agent of a vLLM host: its plan (plugins/module_utils/vllm_gateway_agent.py), drift rows,
and the agent script itself (roles/vllm_service/files/vllm-gateway-agent.sh) run by /bin/sh with a
systemctl on PATH that prints what systemd's `is-active` prints (the real systemd: molecule/vllm_service)."""
import os
import subprocess
import time

import pytest

from conftest import ROOT

from ansible_collections.llmops.serving.plugins.module_utils import vllm_gateway_agent as ga

SCRIPT = os.path.join(ROOT, "roles", "vllm_service", "files", "vllm-gateway-agent.sh")


def view(name="default", host="127.0.0.1", port=8000, serves_http=True):
    return dict(name=name, host=host, port=port, serves_http=serves_http)


def test_listens_on_each_bind_address_of_the_instances():
    got = ga.plan([view(), view("b", port=8001), view("c", host="10.0.0.5", port=8002)],
                  dict(port=8399, address="", fronted=True))
    assert got == dict(on=True, port=8399, address="", listen=["10.0.0.5:8399", "127.0.0.1:8399"], exec_stop="",
                       problems=[])


def test_off_without_a_gateway_with_port_0_or_without_an_http_instance():
    for settings, views in ((dict(port=8399, fronted=False), [view()]), (dict(port=0, fronted=True), [view()]),
                            (dict(port=8399, fronted=True), [view(serves_http=False)])):
        assert ga.plan(views, dict(settings, stop_delay=3)) == dict(on=False, port=0, address="", listen=[],
                                                                    exec_stop="", problems=[])


def test_an_explicit_address_is_listened_on_and_told_to_the_gateway():
    got = ga.plan([view(host="localhost")], dict(port=8399, address="fd00::5", fronted=True))
    assert (got["listen"], got["address"]) == (["[fd00::5]:8399"], "fd00::5")
    assert ga.plan([view(host="localhost")], dict(port=8399, fronted=True))["listen"] == ["127.0.0.1:8399"]


@pytest.mark.parametrize("views,settings,message", [
    ([view()], dict(port=70000, fronted=True), "vllm_gateway_agent_port must be a TCP port"),
    ([view()], dict(port="x", fronted=True), "vllm_gateway_agent_port must be a TCP port"),
    ([view(port=8399)], dict(port=8399, fronted=True), "vllm_gateway_agent_port 8399 is the port of instance default"),
    ([view(host="vllm1.internal")], dict(port=8399, fronted=True), "set vllm_gateway_agent_address"),
    ([view()], dict(port=8399, address="gw.example", fronted=True), "vllm_gateway_agent_address 'gw.example' is no IP"),
    ([view()], dict(port=8399, fronted=True, stop_delay=-1), "vllm_gateway_stop_delay must be whole seconds"),
    ([view()], dict(port=8399, fronted=True, stop_delay="3s"), "vllm_gateway_stop_delay must be whole seconds"),
    ([view()], dict(port=8399, fronted=True, stop_delay=61), "vllm_gateway_stop_delay must be whole seconds"),
    ([view()], dict(port=8399, fronted=True, stop_delay=True), "vllm_gateway_stop_delay must be whole seconds"),
    # A bad delay fails with the agent off too (bad input is named wherever it is).
    ([view()], dict(port=0, fronted=True, stop_delay=-1), "vllm_gateway_stop_delay must be whole seconds"),
])
def test_bad_settings_name_the_variable(views, settings, message):
    got = ga.plan(views, settings)
    assert not got["on"] and got["port"] == 0 and any(message in p for p in got["problems"]), got


def test_the_stop_delay_is_an_exec_stop_of_instances_behind_a_gateway_agent():
    on = ga.plan([view()], dict(port=8399, fronted=True, stop_delay=3))
    assert on["exec_stop"] == "/bin/sh -c '[ -n \"$$EXIT_CODE\" ] || exec sleep 3'"
    assert ga.plan([view()], dict(port=8399, fronted=True, stop_delay=0))["exec_stop"] == ""
    assert ga.plan([view()], dict(port=8399, fronted=True))["exec_stop"] == ""


@pytest.mark.parametrize("env,waits", [({}, True), ({"EXIT_CODE": "killed"}, False), ({"EXIT_CODE": "exited"}, False)])
def test_the_exec_stop_waits_only_while_the_main_process_runs(env, waits):
    """The command as systemd runs it ($$ -> $): sleeps when asked to stop a running server, returns at
    once after the main process has exited (systemd sets EXIT_CODE for ExecStop= only then)."""
    argv = ga.exec_stop(1).replace("$$", "$").split(" ", 2)
    assert argv[:2] == ["/bin/sh", "-c"]
    script = argv[2][1:-1]
    run_env = {k: v for k, v in os.environ.items() if k != "EXIT_CODE"}
    run_env.update(env)
    t0 = time.time()
    subprocess.run(["/bin/sh", "-c", script], env=run_env, check=True, timeout=10)
    assert (time.time() - t0 >= 0.9) is waits


def test_drift_rows():
    on = ga.plan([view()], dict(port=8399, fronted=True))
    paths = ["/etc/systemd/system/llmops-vllm-agent.socket", "/opt/vllm/bin/vllm-gateway-agent.sh"]
    rows = ga.drift_rows("n1", dict(agent=on, changed_paths=paths, exists={paths[0]: True, paths[1]: False},
                                    socket={"unit_file_state": "enabled", "active_state": "inactive"}, paths=paths))
    assert [(r["path"], r["found"]) for r in rows] == [
        (paths[0], "hand-edited (differs from the role's)"), (paths[1], "missing"),
        ("llmops-vllm-agent.socket", "enabled/inactive")]
    clean = dict(agent=on, changed_paths=[], exists={p: True for p in paths},
                 socket={"unit_file_state": "enabled", "active_state": "active"}, paths=paths)
    assert ga.drift_rows("n1", clean) == []
    off = ga.plan([view()], dict(port=0, fronted=True))
    assert ga.drift_rows("n1", dict(clean, agent=off))[0]["found"].startswith("present: " + paths[0])
    assert ga.drift_rows("n1", dict(agent=off, exists={}, socket={}, paths=paths)) == []


def ask(tmp_path, line, state="active", rc=0):
    """The script's answer to ``line`` with a systemctl that prints ``state`` (and records its argv)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "systemctl"
    fake.write_text('#!/bin/sh\necho "$@" >> %s/argv\n%s\nexit %d\n'
                    % (tmp_path, 'echo "%s"' % state if state is not None else ":", rc))
    fake.chmod(0o755)
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir, LC_ALL="C")
    p = subprocess.run(["/bin/sh", SCRIPT], input=line, capture_output=True, text=True, env=env, timeout=10,
                       check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("state,answer", [
    ("active", "up\n"), ("reloading", "up\n"),
    ("activating", "down #activating\n"), ("deactivating", "down #deactivating\n"),
    ("inactive", "down #inactive\n"), ("failed", "down #failed\n"),
])
def test_the_script_answers_up_only_for_an_active_unit(tmp_path, state, answer):
    assert ask(tmp_path, "default\n", state, 0 if state == "active" else 3) == answer
    assert (tmp_path / "argv").read_text() == "is-active vllm@default.service\n"


def test_the_script_gives_no_word_when_systemctl_gives_no_state(tmp_path):
    # HAProxy ignores a reply without up/down: the /health check alone decides (fail open, never all DOWN).
    assert ask(tmp_path, "default\n", None, 1) == "#no state from systemctl\n"
    assert ask(tmp_path, "default\n", "Failed to connect to bus", 1) == "#no state from systemctl\n"


@pytest.mark.parametrize("line", ["\n", "", "a b\n", "../x\n", "x;reboot\n", "$(id)\n", "a" * 201 + "\n"])
def test_the_script_refuses_what_is_no_instance_name_without_asking_systemd(tmp_path, line):
    assert ask(tmp_path, line) == "down #not an instance name\n"
    assert not (tmp_path / "argv").exists()


def test_the_script_takes_a_crlf_line_and_answers_only_up_or_down(tmp_path):
    assert ask(tmp_path, "tiny-1.b_2\r\n") == "up\n"
    with open(SCRIPT, encoding="utf-8") as f:
        said = {x.split('echo "', 1)[1].split('"')[0].split(" ")[0] for x in f if 'echo "' in x}
    # Never a word that changes the admin state (ready, drain, maint: it would undo the role's drain).
    assert said == {"up", "down", "#no"}, said
