# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""A resumable pull of one file from an HTTP(S) mirror (the model_pull module).

The bytes go to a partial file beside the destination (``DIR/.NAME.partial``,
mode 0600) that survives an interruption. The next pull asks the server for
the rest only (``Range: bytes=N-``, N = the partial's length):

- ``206`` whose ``Content-Range`` starts at N (and, with a known size, ends at
  the size) is appended to the partial;
- ``200`` (a server without range support) is written from byte 0;
- ``416``, a ``206`` for other bytes, or a partial longer than the expected
  size: the partial is dropped and the file fetched from byte 0.

The sha256 is computed while the bytes arrive (the kept prefix is read once
from disk, the new bytes as they are written). A complete file whose sha256
differs is removed; when it was a resumed transfer, the partial may have come
from another version of the file, so the pull starts once more from byte 0
(one retry) before it fails naming the file and both digests. Only a file
with the right sha256 is moved in place (``os.rename`` in the same
directory), so the destination never holds wrong or partial bytes.

A broken transfer (connection lost, timeout, an HTTP error, fewer bytes than
announced) keeps the partial: a re-run (or the role's retries) resumes it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re

CHUNK = 1 << 20
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


class PullError(Exception):
    """A pull that did not complete; the message names the file, the URL and what is kept."""

    def __init__(self, msg, status=None):
        super(PullError, self).__init__(msg)
        self.status = status


def partial_path(dest):
    """Where the bytes of dest collect until they are verified: DIR/.NAME.partial."""
    head, name = os.path.split(dest)
    return os.path.join(head, "." + name + ".partial")


def parse_content_range(value):
    """(first, last, total or None) of a ``Content-Range: bytes A-B/T`` header, or None."""
    m = CONTENT_RANGE_RE.match(value or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), None if m.group(3) == "*" else int(m.group(3))


def sha256_file(path, limit=None, h=None):
    """sha256 object over the file's first ``limit`` bytes (all when None)."""
    h = h or hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h


class Puller(object):
    """Pull ``url`` to ``dest`` (see the module docstring).

    ``opener(url, headers)`` returns a response (``getcode()``, ``headers``,
    ``read(n)``, ``close()``) or raises; an exception with a ``code``
    attribute (urllib's HTTPError) is an HTTP error status.
    """

    def __init__(self, url, dest, sha256, size=None, opener=None):
        self.url = url
        self.dest = dest
        self.sha256 = str(sha256 or "").strip().lower()
        self.size = size
        self.opener = opener
        self.partial = partial_path(dest)
        self.result = dict(changed=False, url=url, dest=dest, partial=self.partial, resumed_from=0, bytes_fetched=0,
                           size=None, sha256=None, status=None, restarts=[], msg="")
        if not SHA256_RE.match(self.sha256):
            raise PullError("sha256 for %s must be 64 hex digits (sha256sum FILE); got %r" % (dest, sha256))
        if size is not None and size < 0:
            raise PullError("size for %s must be a non-negative number of bytes; got %r" % (dest, size))

    # -- what is on disk -------------------------------------------------
    def in_place(self):
        """Whether dest already holds the expected bytes (hashing only a file of the right size)."""
        if os.path.isdir(self.dest):
            raise PullError("%s is a directory; dest must be the path of the file" % self.dest)
        if not os.path.isfile(self.dest):
            return False
        size = os.path.getsize(self.dest)
        if self.size is not None and size != self.size:
            return False
        if sha256_file(self.dest).hexdigest() != self.sha256:
            return False
        self.result.update(size=size, sha256=self.sha256)
        return True

    def partial_offset(self):
        """Bytes a pull keeps from the partial (0: from the start; a partial longer than size is dropped)."""
        if not os.path.isfile(self.partial):
            return 0
        have = os.path.getsize(self.partial)
        if self.size is not None and have > self.size:
            self.result["restarts"].append("the partial holds %d bytes, more than the %d expected: fetched again from "
                                           "byte 0" % (have, self.size))
            return 0
        return have

    # -- the transfer ----------------------------------------------------
    def _request(self, offset):
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            return self.opener(self.url, headers)
        except Exception as e:  # HTTPError (has .code), URLError, timeouts, TLS
            code = getattr(e, "code", None)
            if code is not None:
                self.result["status"] = code
            if code == 416 and offset:
                return None
            raise PullError("%s: %s failed (%s%s); %s" % (
                self.dest, self.url, "HTTP %s: " % code if code is not None else "", getattr(e, "reason", None) or e,
                self._kept()), status=code)

    def _kept(self):
        if os.path.isfile(self.partial):
            return "the partial %s (%d bytes) is kept: a re-run resumes from there" % (
                self.partial, os.path.getsize(self.partial))
        return "nothing was kept"

    def _open(self, offset):
        """(response, offset really resumed from, expected body length or None), restarting from 0 when needed."""
        resp = self._request(offset)
        if resp is None:
            self.result["restarts"].append("the server refused the range bytes=%d- (416): fetched again from byte 0"
                                           % offset)
            return self._open(0)
        status = resp.getcode()
        self.result["status"] = status
        length = resp.headers.get("Content-Length")
        length = int(length) if length is not None and length.strip().isdigit() else None
        if status == 206 and offset:
            cr = parse_content_range(resp.headers.get("Content-Range"))
            if cr and cr[0] == offset and (self.size is None or (cr[1] + 1 == self.size and cr[2] in (None, self.size))):
                return resp, offset, cr[1] - cr[0] + 1
            resp.close()
            self.result["restarts"].append("the server answered the range bytes=%d- with 206 and Content-Range %r: "
                                           "fetched again from byte 0" % (offset, resp.headers.get("Content-Range")))
            return self._open(0)
        if status == 200:
            if offset:
                self.result["restarts"].append("the server ignored the range bytes=%d- (200, no range support): "
                                               "fetched again from byte 0" % offset)
            return resp, 0, length
        resp.close()
        raise PullError("%s: %s answered HTTP %s (expected 200%s); %s" % (
            self.dest, self.url, status, " or 206" if offset else "", self._kept()), status=status)

    def transfer(self, offset):
        """Fetch into the partial from offset; return the sha256 of the whole partial."""
        self.result["resumed_from"] = 0
        if offset and self.size is not None and offset == self.size:
            # A complete partial from a run that stopped before the move: nothing to fetch.
            self.result["resumed_from"] = offset
            return sha256_file(self.partial).hexdigest()
        resp, offset, expected = self._open(offset)
        h = sha256_file(self.partial, offset) if offset else hashlib.sha256()
        self.result["resumed_from"] = offset
        got = 0
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if offset else os.O_TRUNC)
        try:
            fd = os.open(self.partial, flags, 0o600)
            with os.fdopen(fd, "ab" if offset else "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    f.write(block)
                    h.update(block)
                    got += len(block)
                    self.result["bytes_fetched"] += len(block)
                f.flush()
                os.fsync(f.fileno())
        except (IOError, OSError, EnvironmentError) as e:
            raise PullError("%s: the transfer from %s broke after %d bytes (%s); %s" % (
                self.dest, self.url, got, e, self._kept()))
        except Exception as e:  # http.client.IncompleteRead, ssl errors, ...
            raise PullError("%s: the transfer from %s broke after %d bytes (%s: %s); %s" % (
                self.dest, self.url, got, type(e).__name__, e, self._kept()))
        finally:
            resp.close()
        if expected is not None and got < expected:
            raise PullError("%s: the transfer from %s ended after %d of %d bytes; %s" % (
                self.dest, self.url, got, expected, self._kept()))
        return h.hexdigest()

    def run(self, check_mode=False):
        """Pull unless dest is in place; on success the verified partial waits at self.partial for move()."""
        if self.in_place():
            self.result["msg"] = "%s already has sha256 %s" % (self.dest, self.sha256)
            return self.result
        if not os.path.isdir(os.path.dirname(self.dest) or "."):
            raise PullError("%s: the directory %s does not exist" % (self.dest, os.path.dirname(self.dest)))
        offset = self.partial_offset()
        self.result["changed"] = True
        if check_mode:
            self.result.update(resumed_from=offset, msg="would fetch %s to %s %s" % (
                self.url, self.dest, "from byte %d (the partial's bytes are kept)" % offset if offset else "from byte 0"))
            return self.result
        retried = False
        while True:
            found = self.transfer(offset)
            if found == self.sha256:
                break
            resumed = self.result["resumed_from"]
            os.unlink(self.partial)
            if resumed and not retried:
                # A partial of another version of the file (the mirror changed since): start over once.
                self.result["restarts"].append("sha256 %s after resuming from byte %d (the partial was stale): "
                                               "fetched again from byte 0" % (found, resumed))
                retried, offset = True, 0
                continue
            raise PullError("%s: sha256 mismatch for %s: expected %s, found %s (the download was removed; %s was "
                            "not changed)" % (self.dest, self.url, self.sha256, found, self.dest),
                            status=self.result["status"])
        self.result.update(size=os.path.getsize(self.partial), sha256=found,
                           msg="fetched %d bytes of %s%s" % (
                               self.result["bytes_fetched"], self.url,
                               " (resumed from byte %d)" % self.result["resumed_from"] if self.result["resumed_from"] else ""))
        return self.result

    def move(self):
        """The verified partial becomes dest (same directory: atomic)."""
        os.rename(self.partial, self.dest)
