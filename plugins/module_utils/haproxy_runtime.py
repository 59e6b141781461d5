# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""HAProxy runtime API (stats socket): read server status and sessions, set drain/ready.

Stdlib only. ``show stat`` CSV gives per server ``status`` (UP, DOWN, DRAIN,
MAINT, NOLB, "UP 1/2" while a check is going down...) and ``scur`` (current
sessions) / ``qcur`` (queued). ``set server B/S state drain|ready|maint`` changes
the administrative state; health checks keep running in ``drain``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import time

ADMIN_STATES = ("ready", "drain", "maint")


class HaproxyRuntimeError(Exception):
    """The socket answered something unexpected."""


def parse_show_stat(text):
    """Server rows of ``show stat`` CSV: [{"backend", "server", "status", "scur", "qcur"}]."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("# "):
        raise HaproxyRuntimeError("unexpected 'show stat' answer: %s" % (lines[0] if lines else "(empty)"))
    header = lines[0][2:].split(",")
    rows = []
    for line in lines[1:]:
        rec = dict(zip(header, line.split(",")))
        if rec.get("svname") in ("FRONTEND", "BACKEND", None):
            continue
        rows.append(dict(backend=rec.get("pxname"), server=rec.get("svname"), status=rec.get("status", ""),
                         scur=int(rec.get("scur") or 0), qcur=int(rec.get("qcur") or 0)))
    return rows


def is_ready(row):
    """Takes new traffic: health UP and admin state ready."""
    return row["status"] == "UP" or row["status"].startswith("UP ") or row["status"] == "no check"


def admin_state(row):
    status = row["status"]
    if status.startswith("MAINT"):
        return "maint"
    if status.startswith("DRAIN") or status.startswith("NOLB"):
        return "drain"
    return "ready"


class Runtime(object):
    def __init__(self, path, timeout=5.0):
        self.path = path
        self.timeout = timeout

    def available(self):
        return os.path.exists(self.path)

    def command(self, cmd):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
            s.sendall((cmd + "\n").encode("utf-8"))
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        finally:
            s.close()
        return b"".join(chunks).decode("utf-8", "replace")

    def servers(self):
        return parse_show_stat(self.command("show stat -1 4 -1"))

    def set_state(self, backend, server, state):
        if state not in ADMIN_STATES:
            raise ValueError("state must be one of %s" % ", ".join(ADMIN_STATES))
        out = self.command("set server %s/%s state %s" % (backend, server, state)).strip()
        if out:
            raise HaproxyRuntimeError("set server %s/%s state %s: %s" % (backend, server, state, out))


def sole_server_warning(server, backends):
    """The play's warning when a drain takes a model's only server out (issue 31: say so, naming
    the model); None when every drained backend had another server."""
    if not backends:
        return None
    return ("draining %s takes the only server of %s out of rotation: requests for %s get 503 until this "
            "instance is ready again. Run a second instance of the model (another host or port) to restart "
            "it without a gap." % (server, ", ".join("backend %s" % b for b in backends),
                                   ", ".join("model %s" % (b[2:] if b.startswith("m_") else b) for b in backends)))


class ServerState(object):
    """Drain or ready one server (in every backend that holds it, or one backend)."""

    def __init__(self, runtime, server, backend=None, clock=time.monotonic, sleep=time.sleep):
        self.rt = runtime
        self.server = server
        self.backend = backend
        self.clock = clock
        self.sleep = sleep

    def rows(self):
        return [r for r in self.rt.servers()
                if r["server"] == self.server and (self.backend is None or r["backend"] == self.backend)]

    def others_ready(self, backend):
        return [r for r in self.rt.servers()
                if r["backend"] == backend and r["server"] != self.server and is_ready(r)]

    def others(self, backend):
        return [r for r in self.rt.servers() if r["backend"] == backend and r["server"] != self.server]

    def apply(self, state, check_mode=False, wait=True, timeout=300.0, interval=1.0, require_other_ready=True):
        """Returns a result dict; raises HaproxyRuntimeError with a clear message."""
        result = dict(changed=False, server=self.server, backends=[], waited_s=0.0, sole_server=[])
        rows = self.rows()
        if not rows:
            result["unavailable"] = "server %s is not in any backend of this gateway (not deployed yet?)" % self.server
            return result
        start = self.clock()
        deadline = start + timeout
        for row in rows:
            be = row["backend"]
            entry = dict(backend=be, before=row["status"], sessions_before=row["scur"])
            # `show stat` shows DOWN whatever the admin state of a server that is
            # down: the command is always sent (it is idempotent); `changed`
            # follows what the status shows.
            if admin_state(row) != state:
                result["changed"] = True
            if admin_state(row) != state or row["status"].startswith("DOWN"):
                if state == "drain" and require_other_ready and not check_mode:
                    if not self.others(be):
                        result["sole_server"].append(be)
                    else:
                        while not self.others_ready(be):
                            if self.clock() > deadline:
                                raise HaproxyRuntimeError(
                                    "draining %s/%s would leave backend %s without a ready server (others: %s); "
                                    "waited %.0f s" % (be, self.server, be,
                                                       ", ".join("%s %s" % (o["server"], o["status"]) for o in self.others(be)),
                                                       self.clock() - start))
                            self.sleep(interval)
                if not check_mode:
                    self.rt.set_state(be, self.server, state)
            result["backends"].append(entry)
        if check_mode or not wait:
            return result
        for entry in result["backends"]:
            be = entry["backend"]
            while True:
                cur = [r for r in self.rt.servers() if r["backend"] == be and r["server"] == self.server][0]
                done = (cur["scur"] == 0 and cur["qcur"] == 0) if state == "drain" else (state != "ready" or is_ready(cur))
                if done:
                    break
                if self.clock() > deadline:
                    what = ("%d session(s) still open" % cur["scur"]) if state == "drain" else ("status %s" % cur["status"])
                    goal = "0 sessions" if state == "drain" else "UP"
                    raise HaproxyRuntimeError("%s/%s did not reach %s within %.0f s: %s"
                                              % (be, self.server, goal, timeout, what))
                self.sleep(interval)
            entry["status"] = cur["status"]
            entry["sessions"] = cur["scur"]
        result["waited_s"] = round(self.clock() - start, 3)
        return result
