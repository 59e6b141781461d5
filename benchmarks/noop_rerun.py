# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Wall time of a no-op re-run of site.yml on a converged fleet.

Prints, for 1 host and for all hosts of the inventory's `vllm` group:
  - a normal re-run of site.yml (must report changed=0),
  - a `site.yml --check --diff` run,
  - a `playbooks/drift.yml --check` run,
and the cost per host. Goal (issue 13): no-op and --check --diff <= 10 s on one host.

Against the molecule drift scenario (three real vLLM CPU nodes):
  molecule converge -s drift
  python3 benchmarks/noop_rerun.py --inventory ~/.ansible/tmp/molecule.*.drift/inventory
(the path molecule prints as its ephemeral directory + /inventory), then
  molecule destroy -s drift
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def run(inventory, playbook, extra, limit=None, report_dir=None):
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", "%s/.cache/collections:%s/.venv/lib/python3.11/site-packages" % (ROOT, ROOT))
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    path = os.path.join(ROOT, playbook) if playbook == "site.yml" else os.path.join(ROOT, "playbooks", playbook)
    cmd = ["ansible-playbook", "-i", inventory, path] + extra
    if limit:
        cmd += ["--limit", limit]
    if report_dir:
        cmd += ["-e", "drift_report_dir=%s" % report_dir]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    wall = time.monotonic() - t0
    try:
        stats = json.loads(proc.stdout[proc.stdout.index("{"):])["stats"]
    except (ValueError, KeyError):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        stats = {}
    changed = sum(s.get("changed", 0) for s in stats.values())
    return wall, proc.returncode, changed, len(stats)


def hosts_of(inventory):
    out = subprocess.run(["ansible-inventory", "-i", inventory, "--list"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    return sorted(data.get("vllm", {}).get("hosts", []))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inventory", "-i", required=True)
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the best is printed")
    ap.add_argument("--extra-vars", "-e", action="append", default=[],
                    help="passed to every ansible-playbook run (the same as the converge's, e.g. vllm_port=8016)")
    args = ap.parse_args()
    extra_vars = [a for e in args.extra_vars for a in ("-e", e)]
    hosts = hosts_of(args.inventory)
    if not hosts:
        sys.exit("no hosts in group vllm of %s" % args.inventory)
    report_dir = os.path.join(ROOT, "reports", "drift-bench")
    cases = [
        ("no-op re-run", "site.yml", []),
        ("check --diff", "site.yml", ["--check", "--diff"]),
        ("drift report", "drift.yml", ["--check"]),
    ]
    print("%-14s %6s %9s %9s %8s %3s" % ("CASE", "HOSTS", "WALL_S", "PER_HOST", "CHANGED", "RC"))
    for label, playbook, extra in cases:
        for limit in ([hosts[0]] + ([None] if len(hosts) > 1 else [])):
            n = 1 if limit else len(hosts)
            best = None
            for _attempt in range(args.repeat):
                res = run(args.inventory, playbook, extra + extra_vars, limit, report_dir if playbook == "drift.yml" else None)
                if best is None or res[0] < best[0]:
                    best = res
            wall, rc, changed = best[:3]
            print("%-14s %6d %9.1f %9.1f %8s %3d" % (label, n, wall, wall / n, changed if label != "drift report" else "-", rc))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
