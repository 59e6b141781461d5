"""`make docs`: docs/modules/<name>.md and docs/filters.md from the plugins' own
documentation (DOCUMENTATION / EXAMPLES / RETURN of each module, the
plugins/filter/<name>.yml files), read through `ansible-doc --json`, so they
cannot drift from the code. Generic: every module and filter the collection
has (`ansible-doc -l`) is rendered; new plugins appear on the next run.

A module page keeps what follows its MARKER line (hand-written notes: design,
figures); everything above it is regenerated.

usage: python scripts/gen-plugin-docs.py [--check]   (--check: exit 1 and name the stale files)
"""
import json
import os
import re
import subprocess
import sys
import sysconfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NS = "llmops.serving"
MARKER = "<!-- make docs: the text below is hand-written and kept; the text above is generated -->"


def ansible_doc(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", os.pathsep.join(
        [os.path.join(ROOT, ".cache", "collections"), sysconfig.get_paths()["purelib"]]))
    env.setdefault("ANSIBLE_HOME", os.path.join(ROOT, ".cache", "ansible-home"))
    out = subprocess.run([exe if os.path.exists(exe) else "ansible-doc", "--json"] + list(args),
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit("ansible-doc %s failed:\n%s" % (" ".join(args), out.stderr))
    return json.loads(out.stdout)


def markup(text):
    """ansible-doc markup -> Markdown."""
    text = str(text)
    text = re.sub(r"L\(([^)]+),\s*([^)]+)\)", r"[\1](\2)", text)
    text = re.sub(r"U\(([^)]+)\)", r"<\1>", text)
    text = re.sub(r"B\(([^)]+)\)", r"**\1**", text)
    text = re.sub(r"I\(([^)]+)\)", r"*\1*", text)
    text = re.sub(r"\bP\(([^#()]+)#(\w+)\)", r"`\1` (\2)", text)
    text = re.sub(r"\b(?:C|O|V|RV|M|P|E)\(([^()]*(?:\([^()]*\)[^()]*)*)\)", r"`\1`", text)
    return text.replace("|", "\\|")


def paragraphs(value):
    if value is None:
        return []
    return [markup(v) for v in (value if isinstance(value, list) else [value])]


def cell(value):
    return " ".join(paragraphs(value)).replace("\n", " ")


def fmt_default(opt):
    if "default" not in opt or opt["default"] is None:
        return ""
    return "`%s`" % json.dumps(opt["default"])


def options_table(options, prefix=""):
    rows = []
    for name in sorted(options or {}):
        opt = options[name]
        kind = opt.get("type", "str")
        if kind == "list" and opt.get("elements"):
            kind = "list of %s" % opt["elements"]
        extra = []
        if opt.get("choices"):
            extra.append("choices: %s" % ", ".join("`%s`" % c for c in opt["choices"]))
        if opt.get("aliases"):
            extra.append("aliases: %s" % ", ".join("`%s`" % a for a in opt["aliases"]))
        desc = cell(opt.get("description")) + ("".join(" (%s)" % e for e in extra))
        required = "yes" if opt.get("required") else ""
        rows.append("| `%s%s` | %s | %s | %s | %s |" % (prefix, name, kind, required, fmt_default(opt), desc))
        if opt.get("suboptions"):
            rows += options_table(opt["suboptions"], prefix + name + ".")
    return rows


def return_table(ret, prefix=""):
    rows = []
    for name in sorted(ret or {}):
        val = ret[name]
        fields = (prefix, name, val.get("type", ""), cell(val.get("returned", "")), cell(val.get("description")))
        rows.append("| `%s%s` | %s | %s | %s |" % fields)
        if val.get("contains"):
            rows += return_table(val["contains"], prefix + name + ".")
    return rows


def render(kind, name, data, level=1):
    doc = data.get("doc") or {}
    h = "#" * level
    lines = ["%s %s" % (h, name), "", markup(doc.get("short_description", "")), ""]
    for para in paragraphs(doc.get("description")):
        lines += [para, ""]
    if doc.get("positional"):
        lines += ["Positional arguments: `%s`." % doc["positional"], ""]
    if doc.get("requirements"):
        lines += ["Requirements: %s." % "; ".join(paragraphs(doc["requirements"])), ""]
    opts = doc.get("options") or {}
    if opts:
        lines += ["%s# %s" % (h, "Parameters" if kind == "module" else "Input and arguments"), "",
                  "| name | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
        lines += options_table(opts) + [""]
    attrs = doc.get("attributes") or {}
    if attrs:
        lines += ["%s# Attributes" % h, "", "| attribute | support | description |", "| --- | --- | --- |"]
        for a in sorted(attrs):
            lines.append("| %s | %s | %s |" % (a, attrs[a].get("support", ""), cell(attrs[a].get("description"))))
        lines.append("")
    if doc.get("notes"):
        lines += ["%s# Notes" % h, ""] + ["- %s" % n for n in paragraphs(doc["notes"])] + [""]
    ret = data.get("return") or {}
    if ret:
        lines += ["%s# Returns" % h, "", "| key | type | returned | description |", "| --- | --- | --- | --- |"]
        lines += return_table(ret) + [""]
    examples = (data.get("examples") or "").strip("\n")
    if examples:
        lines += ["%s# Examples" % h, "", "```yaml", examples, "```", ""]
    return lines


def module_page(name, data, old):
    head = ["<!-- Generated by `make docs` (scripts/gen-plugin-docs.py) from plugins/modules/%s.py. -->"
            % name.split(".")[-1]] + render("module", name, data)
    tail = ""
    if old is not None:
        if MARKER in old:
            tail = old.split(MARKER, 1)[1].strip("\n")
        elif old.startswith("<!-- Generated by"):
            tail = ""
        else:  # a hand-written page from before: keep it, below the marker
            tail = re.sub(r"\A# [^\n]*\n", "", old).strip("\n")
            tail = ("## How it works\n\n" + tail) if tail else ""
    text = "\n".join(head).rstrip("\n") + "\n"
    if tail:
        text += "\n" + MARKER + "\n\n" + tail + "\n"
    return text


def filters_page(docs):
    lines = ["<!-- Generated by `make docs` (scripts/gen-plugin-docs.py) from plugins/filter/*.yml. -->",
             "# Filters of %s" % NS, "",
             "Use them by FQCN: `{{ value | %s.NAME(args) }}`." % NS, "",
             "| filter | what |", "| --- | --- |"]
    for name in sorted(docs):
        short = name.split(".")[-1]
        lines.append("| [`%s`](#%s) | %s |" % (short, short, cell((docs[name].get("doc") or {}).get("short_description"))))
    lines.append("")
    for name in sorted(docs):
        lines += render("filter", name.split(".")[-1], docs[name], level=2)
    return "\n".join(lines).rstrip("\n") + "\n"


def index_page(docs):
    lines = ["<!-- Generated by `make docs` (scripts/gen-plugin-docs.py). -->", "# Modules of %s" % NS, "",
             "| module | what |", "| --- | --- |"]
    for name in sorted(docs):
        short = name.split(".")[-1]
        lines.append("| [`%s`](%s.md) | %s |" % (short, short, cell((docs[name].get("doc") or {}).get("short_description"))))
    return "\n".join(lines) + "\n"


def main(check):
    wanted = {}
    mods = sorted(ansible_doc("-t", "module", "-l", NS))
    fils = sorted(ansible_doc("-t", "filter", "-l", NS))
    mdocs = ansible_doc("-t", "module", *mods) if mods else {}
    fdocs = ansible_doc("-t", "filter", *fils) if fils else {}
    undocumented = sorted(n for n in fils if not (fdocs.get(n) or {}).get("doc")
                          or (fdocs[n]["doc"].get("name") not in (n, n.split(".")[-1])))
    if undocumented:
        sys.exit("filters without their own documentation (add plugins/filter/NAME.yml): %s"
                 % ", ".join(undocumented))
    for name in mods:
        path = os.path.join(ROOT, "docs", "modules", name.split(".")[-1] + ".md")
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        wanted[path] = module_page(name, mdocs[name], old)
    wanted[os.path.join(ROOT, "docs", "modules", "README.md")] = index_page(mdocs)
    wanted[os.path.join(ROOT, "docs", "filters.md")] = filters_page(fdocs)
    stale = []
    for path, text in sorted(wanted.items()):
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old == text:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
    if check and stale:
        print("docs are stale (run `make docs` and commit): %s" % ", ".join(stale), file=sys.stderr)
        return 1
    print("plugin docs: %d modules, %d filters; %s" % (
        len(mods), len(fils), ("%d file(s) %s" % (len(stale), "stale" if check else "written")) if stale else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
