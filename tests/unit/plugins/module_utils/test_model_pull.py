# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""model_pull's transfer rules with answers no real server gives on demand (a 206 for other
bytes, a body cut short, an error status); the real-server cases are in
tests/integration/test_model_pull_live.py (nginx, http.server)."""
import hashlib
import io
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import model_pull as mp

DATA = os.urandom(3 * mp.CHUNK + 17)
SHA = hashlib.sha256(DATA).hexdigest()


class Resp(object):
    def __init__(self, status, body, headers=None):
        self.status, self.body, self.headers = status, io.BytesIO(body), dict(headers or {})
        self.headers.setdefault("Content-Length", str(len(body)))
        self.closed = False

    def getcode(self):
        return self.status

    def read(self, n):
        return self.body.read(n)

    def close(self):
        self.closed = True


class HTTPError(Exception):
    def __init__(self, code):
        super(HTTPError, self).__init__("HTTP Error %d" % code)
        self.code, self.reason = code, "status %d" % code


def server(*answers):
    """An opener that returns (or raises) the answers in turn and records each request's Range."""
    seen = []

    def opener(url, headers):
        seen.append(headers.get("Range"))
        answer = answers[len(seen) - 1]
        answer = answer(headers) if callable(answer) else answer
        if isinstance(answer, Exception):
            raise answer
        return answer
    return opener, seen


def ranged(headers):
    start = int(headers["Range"].split("=")[1].rstrip("-"))
    return Resp(206, DATA[start:], {"Content-Range": "bytes %d-%d/%d" % (start, len(DATA) - 1, len(DATA))})


def full(headers=None):
    return Resp(200, DATA)


def test_names_and_content_range():
    assert mp.partial_path("/srv/models/x/model.safetensors") == "/srv/models/x/.model.safetensors.partial"
    assert mp.parse_content_range("bytes 10-99/100") == (10, 99, 100)
    assert mp.parse_content_range("bytes 10-99/*") == (10, 99, None)
    assert mp.parse_content_range("items 1-2/3") is None and mp.parse_content_range(None) is None


def test_resume_appends_and_hashes_the_kept_bytes(tmp_path):
    dest = tmp_path / "w.bin"
    (tmp_path / ".w.bin.partial").write_bytes(DATA[:1000])
    opener, seen = server(ranged)
    p = mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener)
    res = p.run()
    p.move()
    assert seen == ["bytes=1000-"] and res["status"] == 206
    assert res["resumed_from"] == 1000 and res["bytes_fetched"] == len(DATA) - 1000 and res["sha256"] == SHA
    assert dest.read_bytes() == DATA and not (tmp_path / ".w.bin.partial").exists()


def test_a_206_for_other_bytes_restarts_from_zero(tmp_path):
    dest = tmp_path / "w.bin"
    (tmp_path / ".w.bin.partial").write_bytes(DATA[:1000])
    other = Resp(206, DATA[500:], {"Content-Range": "bytes 500-%d/%d" % (len(DATA) - 1, len(DATA))})
    opener, seen = server(other, full)
    res = mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert seen == ["bytes=1000-", None] and res["status"] == 200 and res["resumed_from"] == 0
    assert other.closed and "Content-Range 'bytes 500-" in res["restarts"][0]


def test_a_206_for_another_total_size_restarts_from_zero(tmp_path):
    dest = tmp_path / "w.bin"
    (tmp_path / ".w.bin.partial").write_bytes(DATA[:1000])
    longer = Resp(206, DATA[1000:], {"Content-Range": "bytes 1000-%d/%d" % (len(DATA) - 1, len(DATA) + 5)})
    opener, seen = server(longer, full)
    res = mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert seen == ["bytes=1000-", None] and res["resumed_from"] == 0


def test_a_body_cut_short_keeps_the_partial(tmp_path):
    dest = tmp_path / "w.bin"
    cut = Resp(200, DATA[:mp.CHUNK + 5], {"Content-Length": str(len(DATA))})
    opener, dummy = server(cut)
    with pytest.raises(mp.PullError) as e:
        mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert "ended after %d of %d bytes" % (mp.CHUNK + 5, len(DATA)) in str(e.value)
    assert "a re-run resumes" in str(e.value)
    assert (tmp_path / ".w.bin.partial").read_bytes() == DATA[:mp.CHUNK + 5] and not dest.exists()
    # the next run asks for the rest
    opener, seen = server(ranged)
    res = mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert seen == ["bytes=%d-" % (mp.CHUNK + 5)] and res["sha256"] == SHA


def test_an_error_status_keeps_the_partial(tmp_path):
    dest = tmp_path / "w.bin"
    (tmp_path / ".w.bin.partial").write_bytes(DATA[:1000])
    opener, dummy = server(HTTPError(503))
    with pytest.raises(mp.PullError) as e:
        mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert e.value.status == 503 and "(1000 bytes) is kept" in str(e.value)
    assert (tmp_path / ".w.bin.partial").stat().st_size == 1000


def test_a_partial_longer_than_size_is_not_resumed(tmp_path):
    dest = tmp_path / "w.bin"
    (tmp_path / ".w.bin.partial").write_bytes(DATA + b"tail")
    opener, seen = server(full)
    res = mp.Puller("http://m/w.bin", str(dest), SHA, len(DATA), opener).run()
    assert seen == [None] and res["status"] == 200 and "more than the %d expected" % len(DATA) in res["restarts"][0]


def test_bad_input():
    with pytest.raises(mp.PullError, match="64 hex digits"):
        mp.Puller("http://m/w", "/tmp/w", "abc")
    with pytest.raises(mp.PullError, match="non-negative"):
        mp.Puller("http://m/w", "/tmp/w", SHA, -1)
