"""llmops.serving.file_set on real files, run by ansible-playbook on localhost:
check mode changes nothing and says what would change, a run writes content
and attributes, a second run is a no-op, a changed mode or content is fixed
(and shown with --diff), and bad paths fail with the path named."""
import grp
import os
import pwd


from conftest import run_tasks

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


# One ansible-playbook run of the tasks on localhost (tests/ansible_cli.py).
run = run_tasks


def file_set(args, **kw):
    return dict({"llmops.serving.file_set": args, "ignore_errors": True}, **kw)


def test_check_run_noop_drift_and_bad_paths(tmp_path):
    a = tmp_path / "a"
    conf, tool, plain = a / "b" / "unit.conf", a / "tool.py", tmp_path / "plain"
    args = {"directories": [{"paths": [str(a), str(a / "b")], "owner": USER, "group": GROUP, "mode": "0750"}],
            "files": [{"path": str(conf), "content": "[Service]\nX=1\n", "owner": USER, "group": GROUP, "mode": "0640"},
                      {"path": str(tool), "content": "print('hi')\n", "owner": USER, "group": GROUP, "mode": "0755"}]}
    plain.write_text("x")
    drift = "printf '[Service]\\nX=2\\n' > %s && chmod 0644 %s" % (conf, tool)
    res = run(tmp_path, [
        file_set(args, check_mode=True, diff=True),                          # 0 check mode, nothing there
        {"ansible.builtin.stat": {"path": str(a)}},                          # 1
        file_set(args),                                                      # 2 first run
        {"ansible.builtin.shell": "stat -c %a {} {} {}".format(a / "b", conf, tool)},  # 3
        file_set(args),                                                      # 4 second run: no-op
        {"ansible.builtin.shell": drift},                                    # 5 hand edits
        file_set(args, check_mode=True, diff=True),                          # 6 check mode sees both
        {"ansible.builtin.shell": "cat %s" % conf},                          # 7
        file_set(args),                                                      # 8 fixes both
        {"ansible.builtin.shell": "cat {}; stat -c %a {}".format(conf, tool)},  # 9
        file_set({"directories": [{"path": str(plain)}]}),                   # 10
        file_set({"files": [{"path": str(tmp_path / "missing" / "f"), "content": "x"}]}),  # 11
        file_set({"files": [{"path": "relative/f", "content": "x"}]}),       # 12
    ])
    assert res[0]["changed"] and res[0]["changed_paths"] == [str(a), str(a / "b"), str(conf), str(tool)]
    assert not res[1]["stat"]["exists"]
    assert res[2]["changed"] and not res[2].get("failed")
    assert res[3]["stdout_lines"] == ["750", "640", "755"]
    assert not res[4]["changed"] and res[4]["changed_paths"] == []
    assert res[6]["changed_paths"] == [str(conf), str(tool)]
    assert any(d.get("before") == "[Service]\nX=2\n" and d.get("after") == "[Service]\nX=1\n" for d in res[6]["diff"])
    assert any(isinstance(d.get("before"), dict) and d["before"].get("mode") == "0644" for d in res[6]["diff"])
    assert res[7]["stdout"] == "[Service]\nX=2"  # check mode wrote nothing
    assert res[8]["changed_paths"] == [str(conf), str(tool)]
    assert res[9]["stdout_lines"] == ["[Service]", "X=1", "755"]
    assert res[10].get("failed") and "%s exists and is not a directory" % plain in res[10]["msg"]
    assert res[11].get("failed") and "the directory of %s does not exist" % (tmp_path / "missing" / "f") in res[11]["msg"]
    assert res[12].get("failed") and "must be absolute" in res[12]["msg"]


def test_the_write_gate_decides_on_the_controller_from_the_host_state(tmp_path):
    """host_state (the action plugin): with the real vllm_host_state module's read of
    the files, a set the host already holds ends on the controller (ok, no change, no
    module run: a hand edit made after the read is NOT seen, which proves the module
    did not run); with a fresh read the edit is found, shown in check mode with
    --diff, and fixed; a host_state of another shape fails, naming the fix."""
    d = tmp_path / "d"
    conf = d / "unit.conf"
    args = {"directories": [{"path": str(d), "owner": USER, "group": GROUP, "mode": "0750"}],
            "files": [{"path": str(conf), "content": "[Service]\nX=1\n", "owner": USER, "group": GROUP}]}
    read = {"llmops.serving.vllm_host_state": {"files": [str(d), str(conf)]}}
    res = run(tmp_path, [
        file_set(args),                                                          # 0 first write
        dict(read, register="st1"),                                              # 1 host state read
        file_set(dict(args, host_state="{{ st1.files }}")),                      # 2 same: ends on the controller
        {"ansible.builtin.shell": "printf 'X=2\\n' > %s" % conf},                # 3 a hand edit after the read
        file_set(dict(args, host_state="{{ st1.files }}")),                      # 4 stale read: not seen
        {"ansible.builtin.command": "cat %s" % conf},                            # 5
        dict(read, register="st2"),                                              # 6 a fresh read
        file_set(dict(args, host_state="{{ st2.files }}"), check_mode=True, diff=True),  # 7
        file_set(dict(args, host_state="{{ st2.files }}")),                      # 8 fixed
        {"ansible.builtin.command": "cat %s" % conf},                            # 9
        file_set(dict(args, host_state="not a dict")),                           # 10
    ])
    assert res[0]["changed"]
    assert res[2]["host_state_same"] is True and not res[2]["changed"] and res[2]["changed_paths"] == []
    assert res[4]["host_state_same"] is True and res[5]["stdout"] == "X=2"
    assert res[7]["host_state_same"] is False and res[7]["changed"] and res[7]["changed_paths"] == [str(conf)]
    assert res[7]["diff"][0]["before"] == "X=2\n" and res[7]["diff"][0]["after"] == "[Service]\nX=1\n"
    assert res[8]["changed"] and res[9]["stdout"] == "[Service]\nX=1"
    assert res[10]["failed"] and "host_state must be the files of the vllm_host_state" in res[10]["msg"]
