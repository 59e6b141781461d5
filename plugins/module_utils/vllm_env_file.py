# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The instance env file as vllm_service writes it (templates/instance.env.j2:
``NAME="value"``, backslash and double quote escaped), read back: the one
reader. Standard library only, no collection import: it is shipped to hosts
beside the scripts that read the key (the health watchdog's vllm_client.py,
the monitoring role's vllm_probe.py) and imported there from their own
directory; modules and filters import it from the collection.

``API_KEY_ENV`` is the one spelling of the variable that carries an
instance's API key (the env template writes it, the warmup hook and the
watchdog are told its name, the checks refuse it in ``env``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

API_KEY_ENV = "VLLM_API_KEY"


def unquote(value):
    """``"a\\"b"`` -> ``a"b``: the value of one line, as the template quotes it."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        out, i, inner = [], 0, value[1:-1]
        while i < len(inner):
            if inner[i] == "\\" and i + 1 < len(inner):
                i += 1
            out.append(inner[i])
            i += 1
        return "".join(out)
    return value


def read_value(path, name=API_KEY_ENV):
    """``name``'s value in the env file ``path``; "" when the file or the variable is absent."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (IOError, OSError, TypeError):
        return ""
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == name:
            return unquote(value)
    return ""
