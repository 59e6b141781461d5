"""llmops.serving.report_file run by ansible-playbook on a host that is not the
controller (an unreachable one: the plugin must not connect): the file lands on
the controller with to_nice_json's bytes, parents are made, check mode writes
nothing (unless the task says check_mode: false), and bad input fails naming it."""
import json
import os
import stat
import subprocess

import yaml

from conftest import ansible_env, ansible_tool


def run(tmp_path, tasks, *extra):
    play = tmp_path / "play.yml"
    # A host that does not exist: any connection attempt would be unreachable.
    play.write_text(yaml.safe_dump([{"hosts": "nowhere", "gather_facts": False, "tasks": tasks}]))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "nowhere,", "-e", "ansible_host=192.0.2.1",
                           "-e", "ansible_connection=ssh", "-e", "ansible_ssh_timeout=1", str(play)] + list(extra),
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return [t["hosts"]["nowhere"] for t in out["plays"][0]["tasks"]]


def test_writes_json_like_to_nice_json_without_a_connection(tmp_path):
    dest = tmp_path / "a" / "b" / "report.json"
    data = {"z": 1, "a": [1, "é"], "n": None}
    res = run(tmp_path, [
        {"llmops.serving.report_file": {"dest": str(dest), "data": data}, "register": "r"},
        {"ansible.builtin.set_fact": {"nice": "{{ data | to_nice_json }}\n"}, "vars": {"data": data}},
    ])
    assert not res[0].get("unreachable") and not res[0].get("failed"), res[0]
    assert res[0]["changed"] is False and res[0]["written"] is True and res[0]["dest"] == str(dest)
    assert dest.read_text(encoding="utf-8") == res[1]["ansible_facts"]["nice"]
    assert json.loads(dest.read_text(encoding="utf-8")) == data
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(dest.parent).st_mode) == 0o755
    assert [p.name for p in dest.parent.iterdir()] == ["report.json"]  # no temp file left


def test_text_content_and_mode(tmp_path):
    dest = tmp_path / "drift.txt"
    res = run(tmp_path, [{"llmops.serving.report_file": {"dest": str(dest), "content": "a\nb\n", "mode": "0600"}}])
    assert res[0]["size"] == 4 and dest.read_bytes() == b"a\nb\n"
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600


def test_check_mode_writes_nothing_unless_the_task_says_so(tmp_path):
    skipped, forced = tmp_path / "x.json", tmp_path / "y.json"
    res = run(tmp_path, [
        {"llmops.serving.report_file": {"dest": str(skipped), "data": {}}},
        {"llmops.serving.report_file": {"dest": str(forced), "data": {}}, "check_mode": False},
    ], "--check")
    assert res[0]["written"] is False and "dest" not in res[0] and not skipped.exists()
    assert res[1]["written"] is True and forced.exists()


def test_bad_input_names_the_option(tmp_path):
    res = run(tmp_path, [
        {"llmops.serving.report_file": {"dest": str(tmp_path / "x"), "content": "a", "data": {}},
         "ignore_errors": True},
        {"llmops.serving.report_file": {"dest": str(tmp_path / "x"), "content": "a", "mode": "rw"},
         "ignore_errors": True},
        {"llmops.serving.report_file": {"dest": str(tmp_path / "x"), "content": "a", "bogus": 1},
         "ignore_errors": True},
    ])
    assert res[0]["failed"] and "content" in res[0]["msg"] and "data" in res[0]["msg"]
    assert res[1]["failed"] and "mode='rw'" in res[1]["msg"]
    assert res[2]["failed"] and "bogus" in res[2]["msg"]
    assert not (tmp_path / "x").exists()
