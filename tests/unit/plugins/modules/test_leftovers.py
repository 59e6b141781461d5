"""llmops.serving.leftovers on real files, run by ansible-playbook on localhost
(no units: the unit side runs under systemd in molecule/vllm_service): check
mode lists and keeps, a run removes files, directories and globs, a package
configuration file goes only when it carries the marker, a second run is a
no-op, and no file content reaches the result."""
import json


from conftest import run_tasks


# One ansible-playbook run of the tasks on localhost (tests/ansible_cli.py).
run = run_tasks


def test_check_remove_and_second_run(tmp_path):
    own = tmp_path / "llmops"
    own.mkdir()
    (own / "keys.map").write_text("0123abcd SECRETDIGEST\n")
    env_a, env_b = tmp_path / "a.env", tmp_path / "b.env"
    env_a.write_text("VLLM_API_KEY=sk-secret\n")
    env_b.write_text("X=1\n")
    ours, theirs = tmp_path / "haproxy.cfg", tmp_path / "other.cfg"
    ours.write_text("# llmops.serving gateway: one frontend\n")
    theirs.write_text("global\n  daemon\n")
    args = {"paths": [str(own), str(tmp_path / "*.env"), str(tmp_path / "never-there")],
            "conffiles": [{"path": str(ours), "marker": r"llmops\.serving gateway"},
                          {"path": str(theirs), "marker": r"llmops\.serving gateway"}]}
    res = run(tmp_path, [
        {"llmops.serving.leftovers": args, "check_mode": True},   # 0 check mode
        {"ansible.builtin.command": "ls %s" % tmp_path},          # 1
        {"llmops.serving.leftovers": args},                       # 2 removes
        {"ansible.builtin.command": "ls %s" % tmp_path},          # 3
        {"llmops.serving.leftovers": args},                       # 4 second run
    ])
    expected = sorted([str(own), str(env_a), str(env_b), str(ours)])
    assert res[0]["changed"] and res[0]["leftovers"]["paths"] == expected
    assert res[0]["lines"] == ["remove %s" % p for p in expected]
    assert {"a.env", "b.env", "haproxy.cfg", "llmops"} <= set(res[1]["stdout_lines"])
    assert res[2]["changed"] and res[2]["leftovers"]["paths"] == expected
    assert sorted(res[3]["stdout_lines"]) == ["other.cfg", "play.yml"]
    assert not res[4]["changed"] and res[4]["lines"] == []
    text = json.dumps(res)
    assert "sk-secret" not in text and "SECRETDIGEST" not in text


def test_a_bad_marker_fails_naming_the_file(tmp_path):
    res = run(tmp_path, [{"llmops.serving.leftovers": {"conffiles": [{"path": "/etc/x.cfg", "marker": "("}]},
                          "ignore_errors": True}])
    assert res[0].get("failed") and "marker of /etc/x.cfg is not a regular expression" in res[0]["msg"]
