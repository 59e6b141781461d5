"""vllm_service in production shape: failure cases (recorded by side_effect.yml) and live state."""
import json
import os
import re
import subprocess

import pytest
import yaml

KEY = "molecule-prod-key-5e1f0c7a"
DROPIN_A = "/etc/systemd/system/vllm@a.service.d/10-instance.conf"
DROPIN_B = "/etc/systemd/system/vllm@b.service.d/10-instance.conf"
# testinfra runs commands through Ansible's command module, which logs its
# argv to the journal: never put KEY itself in a command line. The shell
# reads it from the env file instead.
KEY_FROM_FILE = "$(sed -n 's/^VLLM_API_KEY=\"\\(.*\\)\"$/\\1/p' /etc/vllm/a.env)"


@pytest.fixture(scope="module")
def outcomes(host):
    with host.sudo():
        return json.loads(host.check_output("cat /root/vllm-prod-outcomes.json"))


def test_both_instances_served_after_converge(outcomes):
    before = outcomes["before"]
    assert before["health"] == {"8201": 200, "8202": 200}
    assert before["pids"]["a"] != "0" and before["pids"]["b"] != "0"
    assert before["pids"]["a"] != before["pids"]["b"]
    assert before["completion_status"] == 200 and before["completion_tokens"] == 3


@pytest.mark.parametrize("step,needle", [
    ("bad_flag", "max_num_seqs"),
    ("fictional_flag", "swap_space"),
])
def test_bad_flags_fail_before_any_change(outcomes, step, needle):
    before, after = outcomes["before"], outcomes[step]
    assert after["failed"], after
    assert needle in after["msg"]
    assert "preflight" in after["task"].lower() or "options" in after["task"].lower(), after["task"]
    # Untouched: same processes, same files, still answering.
    assert after["pids"] == before["pids"]
    assert after["files"] == before["files"]
    assert after["health"] == {"8201": 200, "8202": 200}


# Issue 13's holes (side_effect.yml): (step, words the message must contain).
BAD_INPUTS = [
    ("control_char", ["vllm_instances[1].served_model_name", "control character"]),
    ("dot_name", ["vllm_instances[1].name", "'..'"]),
    ("low_port", ["vllm_instances[1].port", "1024..65535"]),
    ("public_bind", ["vllm_instances[1].host", "/invocations", "vllm_allow_unauthenticated_public_bind"]),
    ("secret_arg", ["vllm_instances[1].args.hf_token", "put it in env"]),
    ("tp_uni", ["tensor_parallel_size", "uni", "distributed_executor_backend: mp"]),
    ("model_len", ["vllm_instances[1].args.max_model_len = 4096", "max_position_embeddings 2048"]),
    ("unreadable_model", ["vllm_instances[1].model /srv/models/tiny-private", "cannot be read by the service user vllm"]),
    ("lora_other_base", ["adapter other (vllm_instances[1].lora_adapters[0])",
                         "made for base model 'meta-llama/Llama-3.1-8B'", "base:"]),
]


@pytest.mark.parametrize("step,needles", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_instance_values_fail_before_any_change(outcomes, step, needles):
    before, after = outcomes["before"], outcomes[step]
    assert after["failed"], after
    for needle in needles:
        assert needle in after["msg"], (needle, after["msg"])
    assert "preflight" in after["task"].lower() or "options" in after["task"].lower(), after["task"]
    assert after["pids"] == before["pids"]
    assert after["files"] == before["files"]
    assert after["health"] == {"8201": 200, "8202": 200}
    assert after["completion_status"] == 200


def test_secret_arg_value_is_not_shown(outcomes):
    assert "hf_molecule_not_a_token" not in outcomes["secret_arg"]["msg"]


def test_fictional_flag_names_the_real_replacement(outcomes):
    msg = outcomes["fictional_flag"]["msg"]
    assert "swap_space" in msg and ("kv_cache_memory_bytes" in msg or "KVCACHE" in msg or "remove" in msg), msg


def test_engine_that_dies_is_rolled_back(outcomes):
    before, after = outcomes["before"], outcomes["rollback"]
    assert after["failed"], after
    msg = after["msg"]
    assert "Rollback: restored previous files of a" in msg, msg
    assert "Previous config serves again" in msg, msg
    assert "Journal of vllm@a" in msg, msg
    # The old config came back: same drop-in as before, a new process, serving with its key.
    assert after["files"][DROPIN_A] == before["files"][DROPIN_A]
    assert after["files"]["/etc/vllm/a.env"] == before["files"]["/etc/vllm/a.env"]
    assert after["pids"]["a"] not in ("0", before["pids"]["a"])
    assert after["health"]["8201"] == 200
    assert after["completion_status"] == 200 and after["completion_tokens"] == 3
    # b was not touched by a's failure.
    assert after["pids"]["b"] == before["pids"]["b"]
    # The snapshot (it holds env files) is gone once the run ends.
    assert not after["exists"]["/var/lib/vllm-rollback"]


def test_an_adapter_list_change_is_loaded_at_runtime_without_a_restart(outcomes):
    """Issue 33 item 2, through the role: b (VLLM_ALLOW_RUNTIME_LORA_UPDATING, adapters in lora_adapters) gets
    sql replaced by chat in the inventory; the plan syncs it (lora_sync) instead of restarting it: same
    MainPID, its drop-in rewritten (a later start serves chat), chat answers, sql is gone (404), the base
    model still answers."""
    before, after = outcomes["rollback"], outcomes["lora_swap"]
    assert not after["failed"], after
    assert after["plan_lora_sync"] == ["b"] and after["plan_restart"] == [], after
    assert after["pids"]["b"] == before["pids"]["b"] != "0"
    assert after["files"][DROPIN_B] != before["files"][DROPIN_B]
    assert after["answers"] == {"chat": 200, "sql": 404, "tiny-b": 200}, after["answers"]
    assert after["health"] == {"8201": 200, "8202": 200}


def test_removed_instance_is_stopped_and_its_files_gone(host, outcomes):
    after = outcomes["remove"]
    assert not after["failed"], after
    assert after["pids"]["b"] == "0"
    assert after["health"]["8202"] == -1
    assert not after["exists"][DROPIN_B] and not after["exists"]["/etc/vllm/b.env"]
    assert not after["exists"]["/var/lib/vllm/b"]
    assert host.service("vllm@b.service").is_running is False
    assert host.service("vllm@a.service").is_running


def test_check_mode_with_a_new_instance_on_the_converged_host(host, tmp_path):
    """`vllm.yml --check --diff` with one instance more than the host runs (a
    only, after the side effect): the run passes and shows the new instance's
    files; nothing is written or restarted. The new instance has no drop-in on
    the host, so systemd cannot load its unit: check mode must not ask it."""
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    inv_dir = os.path.dirname(inv) if os.path.isfile(inv) else inv
    with open(os.path.join(inv_dir, "group_vars", "vllm")) as fh:
        instances = yaml.safe_load(fh)["vllm_instances"]
    a = [i for i in instances if i["name"] == "a"][0]
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"vllm_instances": [a, dict(a, name="c", port=8203)]}))
    pid = host.check_output("systemctl show -p MainPID --value vllm@a.service")
    root = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", "%s/.cache/collections:%s/.venv/lib/python3.11/site-packages" % (root, root))
    proc = subprocess.run(["ansible-playbook", "-i", inv_dir, os.path.join(root, "playbooks", "vllm.yml"),
                           "--check", "--diff", "-e", "@%s" % extra], capture_output=True, text=True, env=env,
                          cwd=root, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    dropin = [t for t in out.split("TASK [") if t.startswith("llmops.serving.vllm_service : Write each instance's command line")]
    assert dropin and "changed: [vllm-prod] => (item=c)" in dropin[0], out[-4000:]
    assert KEY not in out
    assert not host.file("/etc/systemd/system/vllm@c.service.d").exists
    assert not host.file("/etc/vllm/c.env").exists
    assert not host.file("/var/lib/vllm/c").exists
    assert host.check_output("systemctl show -p MainPID --value vllm@a.service") == pid


def test_outcomes_carry_no_key(host):
    with host.sudo():
        assert KEY not in host.check_output("cat /root/vllm-prod-outcomes.json")


def test_key_only_in_the_root_only_env_file(host):
    with host.sudo():
        env = host.file("/etc/vllm/a.env")
        assert env.user == "root" and env.group == "root" and env.mode == 0o600
        # Never put the key itself in a command: testinfra runs commands through
        # Ansible's command module, which logs its arguments to the journal.
        assert host.check_output("echo " + KEY_FROM_FILE) == KEY
        found = host.run('grep -rlF "%s" /etc /var/lib /opt/vllm /srv /run/systemd' % KEY_FROM_FILE).stdout.split()
    assert found == ["/etc/vllm/a.env"]


def test_key_absent_from_ps_systemctl_show_units_and_journal(host):
    with host.sudo():
        assert KEY not in host.check_output("ps -eo user,pid,args")
        assert KEY not in host.check_output("systemctl show vllm@a.service")
        assert KEY not in host.check_output("systemctl cat vllm@a.service")
        journal = host.check_output("journalctl --no-pager -o verbose")
        assert "vllm@a" in journal or "vllm-a" in journal
        # On failure, show which entries (with their SYSLOG_IDENTIFIER/_COMM) carry the key, masked.
        leaks = [e.replace(KEY, "<KEY>")[:600] for e in re.split(r"\n(?=\S)", journal) if KEY in e]
        assert not leaks, leaks[:5]


def test_key_protects_the_api(host):
    code = host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8201/v1/models")
    assert code == "401"
    with host.sudo():
        code = host.check_output(
            'printf "Authorization: Bearer %%s" "%s" | curl -s -o /dev/null -w "%%{http_code}" -H @- '
            "http://127.0.0.1:8201/v1/models" % KEY_FROM_FILE)
    assert code == "200"


def test_service_runs_sandboxed(host):
    with host.sudo():
        out = host.check_output("systemd-analyze security vllm@a.service --no-pager")
    score = float(out.strip().splitlines()[-1].split("exposure level for vllm@a.service:")[1].split()[0])
    assert score <= 3.5, out.splitlines()[-1]
