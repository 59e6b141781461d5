# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``optional_hosts``: the host pattern of a play for an optional part of the
fleet (Ray, the gateway, GPUStack, monitoring), without the names the
inventory does not have.

Ansible warns "Could not match supplied host pattern, ignoring: NAME" for each
name of a play's pattern that is neither a group nor a host of the inventory
(five such lines on the demo's first screen: ray, gateway, gpustack_server,
gpustack_worker, monitoring). A group that exists, even empty, does not warn,
and neither does an empty pattern (the play is skipped: "no hosts matched").
So the plays of optional groups pass their pattern through this filter: names
the inventory has are kept (with their ``[N]`` subscript and ``!``/``&``
prefix), unknown ones are left out (an unknown ``&`` group empties the whole
pattern), and a pattern with nothing left is ``[]``. Terms with wildcards or
regular expressions are kept as written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

_TERM = re.compile(r"^(?P<op>[!&]?)(?P<name>[^\[\]]+)(?P<sub>\[[^\]]*\])?$")


def _terms(pattern):
    if isinstance(pattern, (list, tuple)):
        out = []
        for p in pattern:
            out.extend(_terms(p))
        return out
    return [t.strip() for t in re.split(r"[:,]", str(pattern or "")) if t.strip()]


def optional_hosts(pattern, groups, required=None):
    """REQUIRED + PATTERN without the names GROUPS (the ``groups`` magic variable) does not know; ``[]`` when none is left."""
    if not isinstance(groups, dict):
        raise AnsibleFilterError("optional_hosts expects the groups magic variable ({group: [hosts]}), got %s"
                                 % type(groups).__name__)
    hosts = set(groups.get("all") or [])
    kept = _terms(required)
    for term in _terms(pattern):
        m = _TERM.match(term)
        name = m.group("name") if m else term
        if not m or any(c in name for c in "*?~") or name in groups or name in hosts or name in ("all", "localhost"):
            kept.append(term)
        elif m.group("op") == "&":
            return []  # the intersection with a group that does not exist is empty
    if not [t for t in kept if not t.startswith("!")]:
        return []
    return ":".join(kept)


class FilterModule(object):
    def filters(self):
        return {"optional_hosts": optional_hosts}
