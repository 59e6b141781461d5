"""Command lines the docs give work as written.

Every `ansible-playbook ...` line in the playbooks' header comments, README.md
and docs/*.md (with its `\\` continuations) is run with --syntax-check, with
the placeholders (INVENTORY, INV, DIR, GROUP, [optional parts]) filled in.
The verify usage line (`-e verify_slo_p99_ttft_ms=500`: -e key=value passes a
string) also runs the verify role's preflight for real on this machine.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT, ansible_env, ansible_tool

INVENTORY = "inventories/a100"
PLACEHOLDERS = {"INVENTORY": INVENTORY, "INV": INVENTORY, "DIR": "/tmp/llmops-doc-dir", "GROUP": "vllm"}


def _joined(lines):
    """Lines with their backslash continuations joined."""
    out, cur = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out


def documented_commands():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))):
        with open(path, encoding="utf-8") as fh:
            header = [re.sub(r"^#\s?", "", l) for l in fh.read().splitlines() if l.startswith("#")]
        found += [(path, l) for l in _joined(header)]
    docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for path in docs:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for block in re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S):
            found += [(path, l) for l in _joined(block.splitlines())]
    cmds = []
    for path, line in found:
        line = line.strip()
        m = re.search(r"(?:^|&&\s*)(ansible-playbook\s.*)$", line)
        if not m:
            continue
        cmds.append((os.path.relpath(path, ROOT), m.group(1)))
    return cmds


def normalize(cmd):
    """The documented line as argv: comments and shell plumbing off, optional
    [parts] kept, placeholders filled, --check/--diff replaced by --syntax-check."""
    cmd = re.split(r"\s+#\s", cmd)[0]
    cmd = re.split(r"\s(?:\|\||\||>|2>|&&)", cmd)[0]
    cmd = re.sub(r"\[(-e [^\]]+)\]", r"\1", cmd)
    argv = [PLACEHOLDERS.get(a, re.sub(r"=(DIR|GROUP)$", lambda m: "=" + PLACEHOLDERS[m.group(1)], a))
            for a in shlex.split(cmd)]
    argv = [a for a in argv if a not in ("--check", "--diff")]
    # Inventories named in the docs that are examples (inventories/prod) -> a real one.
    argv = [INVENTORY if a.startswith("inventories/") and not os.path.isdir(os.path.join(ROOT, a)) else a
            for a in argv]
    return argv[1:] + ["--syntax-check"]


COMMANDS = documented_commands()


def test_the_docs_have_command_lines():
    where = {p for p, _cmd in COMMANDS}
    assert len(COMMANDS) >= 10 and "playbooks/verify.yml" in where and "README.md" in where, COMMANDS


def _run(args):
    proc = subprocess.run([ansible_tool("ansible-playbook")] + args, cwd=ROOT, env=ansible_env(),
                          capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_documented_command_lines_pass_syntax_check():
    unique = sorted({tuple(normalize(c)) for _path, c in COMMANDS})
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda a: (a, _run(list(a))), unique))
    bad = ["ansible-playbook %s\n%s" % (" ".join(a), out[-1500:]) for a, (rc, out) in results if rc != 0]
    assert not bad, "\n\n".join(bad)


def _verify_usage_line():
    lines = [c for p, c in COMMANDS if p == "playbooks/verify.yml"]
    assert lines, "playbooks/verify.yml has no usage line"
    return lines[0]


def _verify_preflight(tmp_path, extra):
    """The verify usage line's -e values through the role's preflight, for real,
    on this machine (connection local; the tokenizer and the vLLM venv the
    preflight looks for are given as inventory vars, below -e)."""
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    vllm:\n      hosts:\n        node:\n"
        "          ansible_connection: local\n"
        "          ansible_python_interpreter: %s\n"
        "          verify_tokenizer_path: %s\n"
        "          verify_vllm_venv: %s\n"
        "          verify_base_url: http://127.0.0.1:8000\n"
        "          verify_model: tiny\n" % (sys.executable, tok, sys.prefix))
    args = [a for a in normalize(_verify_usage_line()) if a != "--syntax-check"]
    args = [str(inv) if a == INVENTORY else a for a in args]
    return _run(args + extra + ["--tags", "verify_preflight", "-e", "verify_report_dir=%s" % tmp_path])


def test_verify_usage_line_numbers_pass_the_preflight(tmp_path):
    assert "verify_slo_p99_ttft_ms=500" in _verify_usage_line()
    rc, out = _verify_preflight(tmp_path, [])
    assert rc == 0 and "failed=0" in out, out[-3000:]


def test_verify_rejects_a_non_number_with_the_variable_named(tmp_path):
    rc, out = _verify_preflight(tmp_path, ["-e", "verify_slo_p99_ttft_ms=fast"])
    assert rc != 0 and "verify_slo_p99_ttft_ms" in out, out[-3000:]


@pytest.mark.parametrize("value,expected", [("500", 500), ("0.5", 0.5), (" 1e3 ", 1000.0), (7, 7),
                                            (None, None), ("fast", "fast"), (True, True), ("", "")])
def test_to_number(value, expected):
    from ansible_collections.llmops.serving.plugins.filter.numbers import to_number
    got = to_number(value)
    assert got == expected and type(got) is type(expected)


def test_to_number_converts_each_value_of_a_mapping():
    from ansible_collections.llmops.serving.plugins.filter.numbers import to_number
    got = to_number({"max_failed": "0", "p99_ttft_ms": None, "min_output_throughput": "0.5", "x": "fast"})
    assert got == {"max_failed": 0, "p99_ttft_ms": None, "min_output_throughput": 0.5, "x": "fast"}
    assert isinstance(got["max_failed"], int) and not isinstance(got["max_failed"], bool)


def test_readme_run_by_hand_block_works_as_pasted(tmp_path):
    """README's "Run it by hand" block in a shell without the venv on PATH,
    no ANSIBLE_* variables and an empty HOME (no ~/.ansible collections):
    each ansible-playbook line with --syntax-check added."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("## Run it by hand", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    assert "ansible-playbook" in block and "ANSIBLE_COLLECTIONS_PATH" in block
    script = "\n".join(l + " --syntax-check" if l.startswith("ansible-playbook") else l
                       for l in _joined(re.sub(r"\s+#\s[^\n]*", "", block).splitlines()))
    # Run under another venv (scripts/python-matrix.sh): activate that one instead.
    if os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, ".venv")):
        script = script.replace(". .venv/bin/activate", ". %s/bin/activate" % sys.prefix)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, script + "\n" + proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("playbook: ") == block.count("ansible-playbook"), proc.stdout


def _env_lines(lines, names):
    """The lines that assign or export one of ``names`` (shell), in order."""
    pat = re.compile(r"(?:^|[\s;&])(?:export\s+)?(?:[A-Z_]+=\S*\s+)*(%s)(?:=|\s|$)" % "|".join(names))
    return [l.strip() for l in lines if pat.search(l) and not l.strip().startswith("#")]


def test_readme_run_by_hand_block_sets_the_environment_make_demo_sets():
    """Issue 31: the block did not set LLMOPS_WHEELS_DIR, so its --check showed a change and a real
    run rewrote /opt/vllm/pip.conf to the PyTorch index. Every variable inventories/local reads from
    the environment, and the ANSIBLE_* ones, get the same value from the README block as from
    scripts/demo.sh (both run here in bash)."""
    inv_names = set()
    for path in glob.glob(os.path.join(ROOT, "inventories", "local", "**", "*.yml"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            inv_names |= set(re.findall(r"lookup\('ansible\.builtin\.env', '([A-Z_]+)'", fh.read()))
    assert {"LLMOPS_WHEELS_DIR", "LLMOPS_DEMO_NODE"} <= inv_names
    names = sorted(inv_names | {"ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH"})
    with open(os.path.join(ROOT, "scripts", "demo.sh"), encoding="utf-8") as fh:
        demo = _env_lines(fh.read().splitlines(), names)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        block = re.search(r"```sh\n(.*?)```", fh.read().split("## Run it by hand", 1)[1], re.S).group(1)
    readme = _env_lines([re.sub(r"\s+#\s.*$", "", l) for l in block.splitlines()], names)

    def assigned(lines):
        return set(n for l in lines for n in re.findall(r"\b([A-Z_]+)=", l) if n in names)

    assert assigned(readme) == assigned(demo), (readme, demo)

    def values(lines, activate):
        script = "\n".join(([activate] if activate else []) + lines + ["true"] +
                           ['printf "%s=%s\\n" {0} "${{{0}:-}}"'.format(n) for n in names])
        env = {"PATH": "%s:/usr/bin:/bin" % os.path.join(ROOT, ".venv", "bin"), "HOME": "/nonexistent",
               "LANG": "C.UTF-8"}
        out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        got = dict(l.split("=", 1) for l in out.stdout.splitlines() if "=" in l)
        # The collections path's second part is the running venv's site-packages: compare the first.
        got["ANSIBLE_COLLECTIONS_PATH"] = got["ANSIBLE_COLLECTIONS_PATH"].split(":")[0]
        return got

    assert values(readme, ". .venv/bin/activate") == values(demo, None)
