# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``to_number``: numbers given on the command line (``-e key=500`` passes the
string ``'500'``) become numbers; anything else comes back unchanged, so the
role's own check still rejects it with its message (``| float`` would turn
``'fast'`` into 0.0 silently)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def to_number(value):
    """int/float unchanged; '500' -> 500, '0.5' / '1e3' -> float; else the input. A mapping: each value."""
    if isinstance(value, dict):
        return dict((k, to_number(v)) for k, v in value.items())
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    text = value.strip()
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return value


class FilterModule(object):
    def filters(self):
        return {"to_number": to_number}
