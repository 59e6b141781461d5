"""Structure figures of the collection (issue 30, item 6): per role its task files,
tasks (every task, block children included, the block itself not) and private
names (`_x` variables set or read); and every Jinja expression in roles/ and
playbooks/ with 6 or more filter applications (`x | f`), counted on jinja2's own
parse tree, with file:line.

usage: python scripts/structure-figures.py [--root DIR] [--json] [--min-filters N]

Counted:
- a Jinja expression is one `{{ ... }}`, one `{% ... %}` expression, or one bare
  condition (when, changed_when, failed_when, until, assert's that);
  its filters are the Filter nodes of its tree (map('string') is one: `| map`);
- YAML: tasks/, handlers/, vars/, defaults/, meta/ of each role and playbooks/;
  templates: every *.j2 file under roles/;
- private names: identifiers starting with `_` (not `__`) read or set in a
  Jinja expression, or set as a key of vars:/set_fact:, by register: or
  loop_var: in the role's files.
"""
import argparse
import json
import os
import sys
import warnings

import jinja2
import yaml
from jinja2 import nodes

BARE_KEYS = {"when", "changed_when", "failed_when", "until", "that"}
THRESHOLD = 6
# What collect() was asked to count (--min-filters).
SETTINGS = {"threshold": THRESHOLD}


class _Loader(yaml.SafeLoader):
    """Composes Ansible YAML (!unsafe, !vault: kept as plain scalars)."""


def _any_tag(loader, suffix, node):
    return None


_ENV = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])


def _parse(text):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # '\.' in a YAML regex string
            return _ENV.parse(text)
    except jinja2.TemplateSyntaxError:
        return None


def _top_expressions(tree):
    """The root expressions of a parse tree (no expression inside another)."""
    out = []

    def walk(node, in_expr):
        is_expr = isinstance(node, nodes.Expr)
        if is_expr and not in_expr:
            out.append(node)
        for child in node.iter_child_nodes():
            walk(child, in_expr or is_expr)

    walk(tree, False)
    return out


def _filters(expr):
    count = 1 if isinstance(expr, nodes.Filter) else 0
    return count + sum(1 for dummy in expr.find_all(nodes.Filter))


def _names(tree):
    found = set()
    for node in tree.find_all(nodes.Name):
        if node.name.startswith("_") and not node.name.startswith("__"):
            found.add(node.name)
    return found


def _source(text, expr):
    """The line of the template the expression starts on (its text, trimmed)."""
    lines = text.splitlines()
    idx = max(expr.lineno - 1, 0)
    return lines[idx].strip() if idx < len(lines) else ""


class Figures(object):
    def __init__(self, root):
        self.root = root
        self.heavy = []  # {file, line, filters, text}
        self.names = {}  # role -> set

    def _expr_in(self, text, rel, line0, block, role):
        """Count the expressions of one string; line0: the 1-based line of its first line."""
        if "{{" not in text and "{%" not in text:
            return
        tree = _parse(text)
        if tree is None:
            return
        self._tree(tree, text, rel, line0, block, role)

    def _bare(self, text, rel, line0, role):
        if not isinstance(text, str) or "{{" in text:
            return self._expr_in(text, rel, line0, False, role) if isinstance(text, str) else None
        tree = _parse("{{ " + text + " }}")
        if tree is not None:
            self._tree(tree, text, rel, line0, False, role)

    def _tree(self, tree, text, rel, line0, block, role):
        if role is not None:
            self.names.setdefault(role, set()).update(_names(tree))
            for node in tree.find_all((nodes.Assign, nodes.For)):
                for n in node.target.find_all(nodes.Name) if not isinstance(node.target, nodes.Name) else [node.target]:
                    if n.name.startswith("_") and not n.name.startswith("__"):
                        self.names[role].add(n.name)
        for expr in _top_expressions(tree):
            n = _filters(expr)
            if n >= SETTINGS["threshold"]:
                line = line0 + (expr.lineno - 1 if block else 0)
                self.heavy.append({"file": rel, "line": line, "filters": n, "text": _source(text, expr)[:100]})

    def yaml_file(self, path, role):
        rel = os.path.relpath(path, self.root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
        if node is not None:
            self._node(node, rel, role, None)

    def _node(self, node, rel, role, key):
        if isinstance(node, yaml.ScalarNode):
            if not isinstance(node.value, str):
                return
            block = node.style in ("|",)
            line0 = node.start_mark.line + 1 + (1 if node.style in ("|", ">") else 0)
            if key in BARE_KEYS:
                self._bare(node.value, rel, line0, role)
            else:
                self._expr_in(node.value, rel, line0, block, role)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self._node(item, rel, role, key if key in BARE_KEYS else None)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                kname = k.value if isinstance(k, yaml.ScalarNode) else None
                if role is not None and kname in ("vars", "set_fact", "ansible.builtin.set_fact") and isinstance(
                        v, yaml.MappingNode):
                    for vk, dummy in v.value:
                        if isinstance(vk, yaml.ScalarNode) and vk.value.startswith("_") and not vk.value.startswith("__"):
                            self.names.setdefault(role, set()).add(vk.value)
                if role is not None and kname in ("register", "loop_var") and isinstance(v, yaml.ScalarNode):
                    if v.value.startswith("_") and not v.value.startswith("__"):
                        self.names.setdefault(role, set()).add(v.value)
                self._node(v, rel, role, kname)

    def template_file(self, path, role):
        rel = os.path.relpath(path, self.root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = _parse(text)
        if tree is not None:
            self._tree(tree, text, rel, 1, True, role)


def _yaml_files(folder):
    out = []
    for base, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                out.append(os.path.join(base, name))
    return out


def _count_tasks(items):
    n = 0
    for item in items or []:
        if not isinstance(item, dict):
            continue
        if any(k in item for k in ("block", "rescue", "always")):
            for k in ("block", "rescue", "always"):
                n += _count_tasks(item.get(k))
        else:
            n += 1
    return n


def _load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_Loader)


def collect(root, threshold=THRESHOLD):
    SETTINGS["threshold"] = threshold
    figs = Figures(root)
    roles = {}
    roles_dir = os.path.join(root, "roles")
    for role in sorted(os.listdir(roles_dir)):
        rdir = os.path.join(roles_dir, role)
        if not os.path.isdir(rdir):
            continue
        task_files = _yaml_files(os.path.join(rdir, "tasks"))
        tasks = sum(_count_tasks(_load(p)) for p in task_files)
        handlers = sum(_count_tasks(_load(p)) for p in _yaml_files(os.path.join(rdir, "handlers")))
        for sub in ("tasks", "handlers", "vars", "defaults", "meta"):
            for p in _yaml_files(os.path.join(rdir, sub)):
                figs.yaml_file(p, role)
        for base, dirs, files in os.walk(rdir):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".j2"):
                    figs.template_file(os.path.join(base, name), role)
        roles[role] = {"task_files": len(task_files), "tasks": tasks, "handlers": handlers,
                       "private_names": len(figs.names.get(role, ()))}
    for role in roles:
        # vars/*.yml top-level keys are set names too
        for p in _yaml_files(os.path.join(roles_dir, role, "vars")):
            data = _load(p)
            if isinstance(data, dict):
                figs.names.setdefault(role, set()).update(
                    k for k in data if isinstance(k, str) and k.startswith("_") and not k.startswith("__"))
        roles[role]["private_names"] = len(figs.names.get(role, ()))
    pb_files = _yaml_files(os.path.join(root, "playbooks"))
    pb_tasks = 0
    for p in pb_files:
        data = _load(p) or []
        if any(isinstance(x, dict) and ("hosts" in x or "import_playbook" in x or "ansible.builtin.import_playbook" in x)
               for x in data):
            for play in data:
                if isinstance(play, dict):
                    for k in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                        pb_tasks += _count_tasks(play.get(k))
        else:  # a task list (playbooks/tasks/*.yml)
            pb_tasks += _count_tasks(data)
        figs.yaml_file(p, None)
    heavy = sorted(figs.heavy, key=lambda h: (h["file"], h["line"]))
    return {
        "threshold": threshold,
        "roles": roles,
        "playbooks": {"files": len(pb_files), "tasks": pb_tasks},
        "private_name_lists": {r: sorted(v) for r, v in figs.names.items()},
        "heavy_expressions": heavy,
    }


def render(data):
    out = []
    out.append("%-18s %10s %6s %9s %14s" % ("role", "task_files", "tasks", "handlers", "private_names"))
    tot = [0, 0, 0]
    for role, r in data["roles"].items():
        out.append("%-18s %10d %6d %9d %14d" % (role, r["task_files"], r["tasks"], r["handlers"], r["private_names"]))
        tot[0] += r["task_files"]
        tot[1] += r["tasks"]
        tot[2] += r["private_names"]
    out.append("%-18s %10d %6d %9s %14d" % ("(all roles)", tot[0], tot[1], "", tot[2]))
    out.append("playbooks/: %d files, %d tasks" % (data["playbooks"]["files"], data["playbooks"]["tasks"]))
    out.append("")
    heavy = data["heavy_expressions"]
    out.append("Jinja expressions with >= %d filters in roles/ and playbooks/: %d" % (data["threshold"], len(heavy)))
    by_area = {}
    for h in heavy:
        parts = h["file"].split(os.sep)
        area = os.sep.join(parts[:2])
        by_area[area] = by_area.get(area, 0) + 1
    for area in sorted(by_area):
        out.append("  %-30s %d" % (area, by_area[area]))
    for h in heavy:
        out.append("  %s:%d  %d filters  %s" % (h["file"], h["line"], h["filters"], h["text"]))
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--min-filters", type=int, default=THRESHOLD)
    args = parser.parse_args(argv)
    data = collect(args.root, args.min_filters)
    if args.json:
        json.dump(data, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(data))
    return 0


_Loader.add_multi_constructor("!", _any_tag)

if __name__ == "__main__":
    sys.exit(main())
