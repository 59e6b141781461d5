# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Jinja is not a programming language here (issue 30, item 5): no Jinja
expression in roles/ or playbooks/ applies 6 or more filters; a chain that long
is a decision, and decisions live in a filter or module_utils (tested on
captures). Counted by scripts/structure-figures.py on jinja2's parse tree
(every `x | f` node of one `{{ }}`, `{% %}` or bare condition).
"""
import importlib.util
import os

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("structure_figures", os.path.join(ROOT, "scripts", "structure-figures.py"))
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)

# Files allowed some 6+-filter expressions: none since the change plan (issue 30
# item 1) and the last chains moved into filters. Never add one.
ALLOWED = {}


def _heavy():
    return figures.collect(ROOT)["heavy_expressions"]


def test_no_jinja_expression_chains_six_filters():
    per_file = {}
    for h in _heavy():
        per_file.setdefault(h["file"].replace(os.sep, "/"), []).append(h)
    over = []
    for path, found in sorted(per_file.items()):
        if len(found) > ALLOWED.get(path, 0):
            over.extend("%s:%d (%d filters): %s" % (h["file"], h["line"], h["filters"], h["text"]) for h in found)
    assert not over, ("Jinja expressions with 6+ filters (move the chain into a filter, "
                      "plugins/filter/ + plugins/module_utils/):\n" + "\n".join(over))


def test_the_allowlist_is_empty():
    assert ALLOWED == {}


def test_the_counter_counts_filters_on_the_parse_tree():
    tree = figures._parse("{{ a | map('string') | list | join(',') ~ ('|' ~ b | default('x|y|z')) }}")
    exprs = figures._top_expressions(tree)
    assert [figures._filters(e) for e in exprs] == [4]
