"""site.yml as a collection playbook: ``ansible-playbook llmops.serving.site``
runs playbooks/site.yml, and the repository's site.yml (the entry point the
docs, the demo and the scenarios use) is that same list of plays and tasks."""
import os
import subprocess

from ansible_cli import ansible_env, ansible_tool
from conftest import ROOT

INVENTORY = os.path.join(ROOT, "inventories", "local")


def _list_tasks(playbook):
    out = subprocess.run([ansible_tool("ansible-playbook"), "-i", INVENTORY, "--list-tasks", playbook],
                         cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, (playbook, out.stdout[-2000:], out.stderr[-2000:])
    # The first line names the playbook file; the plays and tasks follow.
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("playbook: "), lines[:3]
    return lines[1:]


def test_site_is_a_collection_playbook_with_the_same_plays_as_site_yml():
    by_fqcn = _list_tasks("llmops.serving.site")
    root = _list_tasks("site.yml")
    assert by_fqcn == root
    # Every play of the deployment, in order (preflight first, monitoring last).
    plays = [line.strip() for line in root if line.lstrip().startswith("play #")]
    assert len(plays) >= 9, plays
    assert "GPU preflight" in plays[0] or "preflight" in plays[0].lower(), plays[0]
