"""Say in a few lines why a test stage failed, from its log.

CI shows only the tail of `make test`'s output, so scripts/test.sh ends the run
with these lines for each failed stage (and molecule-all.sh for each failed
scenario): the molecule action that failed, the task and host and the task's
message; or pytest's FAILED/ERROR lines; or the log's last lines.

    failure-digest.py NAME LOG   prints the digest to stdout
"""
import json
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BOX = re.compile(r"^\s*[│└┌├─]+\s?")  # molecule 26 frames ansible output
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")  # a timestamped copy of the log
WIDTH = 320
# journal lines that say something went wrong
TROUBLE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Error:|[A-Za-z]+Error\b|Failed|failed with|exited, code=|"
                     r"status=\d+/|signal=|Killed|Main process exited)")
NOT_TROUBLE = re.compile(r"\b(WARNING|INFO|DEBUG)\b")  # vLLM's and Ray's log levels
# `Dec 03 04:01:34.132644 ray-worker ` (short-precise): the node is named already
JOURNAL_STAMP = re.compile(r"^\w{3} \d\d \d\d:\d\d:\d\d\.\d+ \S+ ")


def clean(line):
    line = STAMP.sub("", ANSI.sub("", line.rstrip("\n")))
    return BOX.sub("", line).rstrip()


def squeeze(text, width=WIDTH):
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= width else text[:width - 3] + "..."


def fatal_message(block):
    """The msg of a `fatal: [h]: FAILED! => {...}` block, else its payload."""
    payload = " ".join(s.strip() for s in block).partition("=> ")[2]
    try:
        data = json.loads(payload)
    except ValueError:
        m = re.search(r'"msg": "((?:[^"\\]|\\.)*)"', payload)
        return m.group(1) if m else payload
    if isinstance(data, dict):
        for key in ("msg", "stderr", "assertion"):
            if data.get(key):
                return str(data[key])
    return payload


def molecule_digest(lines):
    out = []
    section = lines
    for n, line in enumerate(lines):
        m = re.search(r"(\S+) ➜ (\S+): Executed: Failed", line)
        if m:
            out.append("  molecule %s failed in its %s action" % (m.group(1), m.group(2)))
            begin = max((k for k in range(n) if "➜ %s: Executing" % m.group(2) in lines[k]), default=0)
            section = lines[begin:n]
            break
    # The hosts that failed (the last PLAY RECAP); each one's last fatal
    # block that was not ignored (expected failures are rescued or ignored
    # earlier in the play: a host stops at the one that failed it).
    failed_hosts = []
    for n, line in enumerate(section):
        if line.startswith("PLAY RECAP"):
            failed_hosts = []
            for rec in section[n + 1:]:
                m = re.match(r"(\S+)\s+: ok=\d+ .*failed=(\d+)", rec)
                if m and int(m.group(2)):
                    failed_hosts.append(m.group(1))
                elif not m and not rec.startswith("  ") and rec.strip():
                    break
    last, task, i = {}, None, 0
    while i < len(section):
        line = section[i]
        if line.startswith("TASK ["):
            text, k = line[6:], i + 1
            while "]" not in text and k < len(section):  # a long name wraps
                text += " " + section[k].strip()
                k += 1
            task = text.split("]")[0]
        m = re.match(r"(?:fatal|failed): \[([^\]]+)\]", line)
        if m:
            block, j = [line], i + 1
            while j < len(section) and section[j].startswith("  "):
                block.append(section[j])
                j += 1
            if not (j < len(section) and section[j].strip() == "...ignoring"):
                last[m.group(1)] = (task, block)
            i = j
            continue
        i += 1
    for host in failed_hosts or list(last)[-1:]:
        if host not in last:
            continue
        task_name, block = last[host]
        msg = fatal_message(block)
        out.append("  %s, task %r:" % (host, squeeze(task_name or "?", 140)))
        out.append("    " + squeeze(msg))
    out.extend(verifier_failures(section))
    out.extend(post_mortem(lines, failed_hosts))
    return out


def verifier_failures(section):
    """testinfra's FAILED/ERROR lines (molecule wraps them: a test id may be
    split over lines) and the first `E ` line of its report."""
    joined = []
    for line in section:
        if line.startswith("  ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    out = []
    for line in joined:
        m = re.match(r"(FAILED|ERROR)\s+(\S.*::.*)", line)
        if m and len(out) < 4:
            test, why = (m.group(2).split(" - ", 1) + [""])[:2]
            out.append("  " + squeeze("%s %s%s" % (m.group(1), test.replace(" ", ""), " - " + why if why else "")))
    first_e = next((line for line in section if re.match(r"E\s+\S", line)), None)
    if out and first_e:
        out.append("    " + squeeze(first_e, 200))
    return out


def post_mortem(lines, failed_hosts):
    """molecule-all.sh's post-mortem of the nodes: each one's failed units and
    last journal lines; the failed hosts first, three nodes at most."""
    nodes, node, part = {}, None, None
    for line in lines:
        m = re.match(r"=== post-mortem (\S+): (failed units|journal)$", line)
        if m:
            node, part = m.group(1), m.group(2)
            nodes.setdefault(node, {"failed units": [], "journal": []})
            continue
        if line.startswith("=== "):
            node = None
        elif node and line.strip():
            nodes[node][part].append(line.strip())
    order = [n for n in failed_hosts if n in nodes] + [n for n in nodes if n not in failed_hosts]
    out = []
    for name in order[:3]:
        units = [u.split()[0] for u in nodes[name]["failed units"]]
        journal = [j for j in nodes[name]["journal"] if not j.startswith("-- ")]
        if not units and name not in failed_hosts:
            continue
        # the last lines that say something went wrong, else the last lines
        bad = [j for j in journal if TROUBLE.search(j) and not NOT_TROUBLE.search(j)] or journal
        out.append("  %s: failed units: %s; journal:" % (name, ", ".join(units) or "none"))
        out.extend("    " + squeeze(JOURNAL_STAMP.sub("", j), 200) for j in bad[-3:])
    return out


def pytest_digest(lines):
    picked = [line for line in lines if re.match(r"(FAILED|ERROR) ", line)]
    out = ["  " + squeeze(p) for p in picked[:6]]
    if len(picked) > 6:
        out.append("  ... and %d more" % (len(picked) - 6))
    summary = [line for line in lines
               if re.match(r"=* ?\d+ \w+.* in [\d.]+s", line) and re.search(r"failed|error", line)]
    if summary:
        out.append("  " + squeeze(summary[-1].strip("= ")))
    return out


def digest(name, path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [clean(raw) for raw in f]
    except OSError as e:
        return ["%s: FAILED (no log: %s)" % (name, e)]
    out = molecule_digest(lines) if any("➜" in line for line in lines) else pytest_digest(lines)
    if not any(line.strip() for line in out):
        tail = [line for line in lines if line.strip()][-3:]
        out = ["  " + squeeze(t) for t in tail]
    return ["%s: FAILED" % name] + out


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: failure-digest.py NAME LOG\n")
        return 2
    print("\n".join(digest(argv[1], argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
