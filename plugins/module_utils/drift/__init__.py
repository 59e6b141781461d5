# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Turn what a check-mode run of a role found into drift rows, and report them.

Split by component, one function per role (all pure: plain data in, rows out,
testable without a host):

* :mod:`.rows`: the row shape and the shared helpers (file, service, version rows);
* :mod:`.vllm`: the vllm_service role; :mod:`.venv`: the venv a running instance uses;
* :mod:`.flash_attn`: the flash_attn role;
* :mod:`.gpustack`: the gpustack role and the inventory's GPUStack models;
* :mod:`.gateway`: the gateway role; :mod:`.ray`: the ray_cluster role;
* this file: the whole run (``collect``: the rows of every host and a ``host``
  row for each that did not finish) and the text table.

The inputs are the results a role registered while it ran in check mode
(template results with their diff, the version it read from the venv, stat
results) and ``systemctl show`` output.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def unreachable_rows(all_hosts, ok_hosts):
    """A row for each host that failed or was unreachable during the drift run."""
    ok = set(ok_hosts or [])
    return [dict(host=h, component="host", instance=None, path=None, expected="reachable, role ran in check mode",
                 found="unreachable or failed (see the play output)", detail=[])
            for h in (all_hosts or []) if h not in ok]


def collect(hostvars, targets):
    """All rows of a drift run and a ``host`` row for each host that did not finish.

    ``targets`` maps a component play (``vllm``, ``flash_attn``, ``gpustack``)
    to the hosts that play targeted; each host that finished that play has the
    fact ``drift_rows_<component>`` (a list, maybe empty). A targeted host
    without it failed or was unreachable: one ``host`` row each (not one per play).
    """
    rows = []
    missing = []
    for component in sorted(targets or {}):
        for host in targets[component] or []:
            hv = hostvars[host] if host in hostvars else {}
            found = hv.get("drift_rows_%s" % component)
            if found is None:
                if host not in missing:
                    missing.append(host)
                continue
            rows.extend(found)
    for host in missing:
        rows.extend(unreachable_rows([host], []))
    return rows


def drift_table(rows):
    """A fixed-width text table (HOST COMPONENT INSTANCE PATH EXPECTED FOUND) and the detail lines."""
    header = ("HOST", "COMPONENT", "INSTANCE", "PATH", "EXPECTED", "FOUND")
    cells = [header] + [tuple(str(r.get(k) if r.get(k) is not None else "-")
                              for k in ("host", "component", "instance", "path", "expected", "found"))
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    lines = []
    for idx, c in enumerate(cells):
        lines.append("  ".join(v.ljust(w) for v, w in zip(c[:-1], widths)) + "  " + c[-1])
        if idx > 0:
            for d in rows[idx - 1].get("detail") or []:
                lines.append("    " + d)
    if not rows:
        lines.append("(no drift)")
    return "\n".join(lines)
