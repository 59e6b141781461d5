# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""llmops.serving.model_pull through the `ansible` CLI on localhost, against real HTTP servers.

- Debian's nginx (Range support), started here on a free loopback port with
  its own prefix, config and access log (`nginx -p TMP -c nginx.conf -g 'daemon off;'`),
  never the system service; a second location of the same server sends at
  2 MB/s, so a run can be killed in the middle of a transfer.
- Python's http.server without Range support (the drift scenario's mirror).

The file is 8 MiB + 4321 bytes of random data. The nginx tests skip only when
nginx is not installed (`apt-get install nginx-light`; .ci/run installs it).

    pytest -q tests/integration/test_model_pull_live.py
"""
import functools
import grp
import hashlib
import http.server
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from ansible_cli import ansible_env, ansible_tool, run_module  # noqa: E402  pylint: disable=wrong-import-position
from ports import free_port  # noqa: E402  pylint: disable=wrong-import-position

NAME = "model-00001-of-00002.safetensors"
SIZE = 8 * 1024 * 1024 + 4321
HALF = SIZE // 2
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def _nginx():
    for exe in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if exe and os.access(exe, os.X_OK):
            return exe
    return None


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    www = tmp_path_factory.mktemp("www")
    data = os.urandom(SIZE)
    (www / NAME).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    (www / "SHA256SUMS").write_text("%s  %s\n" % (sha, NAME))  # the mirror of the models role
    return dict(www=www, data=data, sha256=sha)


class Nginx(object):
    def __init__(self, prefix, port):
        self.prefix = prefix
        self.url = "http://127.0.0.1:%d/%s" % (port, NAME)
        self.slow_url = "http://127.0.0.1:%d/slow/%s" % (port, NAME)
        self.log = prefix / "access.log"

    def mark(self):
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def lines(self, since=0):
        """The GET requests in the access log since a mark: (uri, Range header, status, body bytes sent)
        (the HEADs of the models role's fetch step left out)."""
        text = self.log.read_text() if self.log.exists() else ""
        rows = [tuple(line.split("|")) for line in text.splitlines() if line][since:]
        return [(uri, rng, int(status), int(sent)) for method, uri, rng, status, sent in rows if method == "GET"]


@pytest.fixture(scope="module")
def nginx(shard, tmp_path_factory):
    exe = _nginx()
    if not exe:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run installs it)")
    prefix = tmp_path_factory.mktemp("nginx")
    (prefix / "tmp").mkdir()
    port = free_port()
    user = "user %s;" % OWNER if os.geteuid() == 0 else ""  # workers read the test's tmp dirs (mode 0700)
    (prefix / "nginx.conf").write_text("""
%(user)s
worker_processes 1;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log;
events { worker_connections 64; }
http {
  log_format pull '$request_method|$uri|$http_range|$status|$body_bytes_sent';
  access_log %(p)s/access.log pull;
  client_body_temp_path %(p)s/tmp/body;
  proxy_temp_path %(p)s/tmp/proxy;
  fastcgi_temp_path %(p)s/tmp/fastcgi;
  uwsgi_temp_path %(p)s/tmp/uwsgi;
  scgi_temp_path %(p)s/tmp/scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:%(port)d;
    root %(www)s;
    location /slow/ { alias %(www)s/; limit_rate 2m; }
  }
}
""" % dict(user=user, p=prefix, port=port, www=shard["www"]))
    proc = subprocess.Popen([exe, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(prefix / "nginx.conf"),
                             "-g", "daemon off;"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                err = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                pytest.fail("nginx did not start on 127.0.0.1:%d: %s %s" % (port, proc.stdout.read(), err))
            time.sleep(0.1)
    yield Nginx(prefix, port)
    proc.send_signal(signal.SIGQUIT)  # graceful stop of master and worker
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _NoRange(http.server.SimpleHTTPRequestHandler):
    """Python's http.server as the mirror of the drift scenario: every GET is a 200 of the whole file
    (the Range header dropped explicitly, should a later Python learn ranges)."""
    seen = []

    def send_head(self):
        _NoRange.seen.append(self.headers.get("Range"))
        del self.headers["Range"]
        return super().send_head()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def plain_http(shard):
    handler = functools.partial(_NoRange, directory=str(shard["www"]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d/%s" % (httpd.server_address[1], NAME)
    httpd.shutdown()
    httpd.server_close()


def pull(url, dest, sha256, check=False, **extra):
    args = dict(url=url, dest=str(dest), sha256=sha256, size=SIZE, owner=OWNER, group=GROUP, mode="0640", timeout=30)
    args.update(extra)
    return run_module("model_pull", dict((k, v) for k, v in args.items() if v is not None), check=check)


def partial_of(dest):
    return dest.parent / (".%s.partial" % dest.name)


def assert_in_place(dest, shard):
    assert dest.read_bytes() == shard["data"]
    st = dest.stat()
    assert oct(st.st_mode & 0o7777) == "0o640"
    assert pwd.getpwuid(st.st_uid).pw_name == OWNER and grp.getgrgid(st.st_gid).gr_name == GROUP
    assert not partial_of(dest).exists(), "the partial must be gone once the file is in place"


def test_fresh_pull(nginx, shard, tmp_path):
    dest = tmp_path / NAME
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["changed"] and out["status"] == 200 and out["resumed_from"] == 0 and out["restarts"] == []
    assert out["bytes_fetched"] == SIZE and out["size"] == SIZE and out["sha256"] == shard["sha256"]
    assert_in_place(dest, shard)
    assert nginx.lines(mark) == [("/" + NAME, "-", 200, SIZE)]


def test_second_run_fetches_nothing(nginx, shard, tmp_path):
    dest = tmp_path / NAME
    assert not pull(nginx.url, dest, shard["sha256"]).get("failed")
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["changed"] is False and out["bytes_fetched"] == 0 and out["status"] is None
    assert out["sha256"] == shard["sha256"] and out["size"] == SIZE
    assert nginx.lines(mark) == [], "a file already in place must not be requested"
    assert_in_place(dest, shard)


def test_resume_from_a_partial(nginx, shard, tmp_path):
    """A partial with the first half: one request with Range, 206 with the rest, appended."""
    dest = tmp_path / NAME
    partial_of(dest).write_bytes(shard["data"][:HALF])
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["status"] == 206 and out["resumed_from"] == HALF and out["restarts"] == []
    assert out["bytes_fetched"] == SIZE - HALF and out["sha256"] == shard["sha256"]
    assert_in_place(dest, shard)
    assert nginx.lines(mark) == [("/" + NAME, "bytes=%d-" % HALF, 206, SIZE - HALF)]


def _descendants(pid):
    """Process ids under pid (ansible's worker starts its own session: a process group kill misses it)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _state(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return f.read()
    except OSError:
        return "zombie (gone)"


def test_killed_run_resumes(nginx, shard, tmp_path):
    """A real interruption: a run pulling at 2 MB/s is killed (SIGKILL) mid-transfer; the bytes it
    wrote stay in the partial, and the next run fetches only the rest."""
    dest = tmp_path / NAME
    partial = partial_of(dest)
    env = dict(ansible_env(), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    import json  # pylint: disable=import-outside-toplevel
    args = dict(url=nginx.slow_url, dest=str(dest), sha256=shard["sha256"], size=SIZE, mode="0640")
    proc = subprocess.Popen([ansible_tool("ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m",
                             "llmops.serving.model_pull", "-a", json.dumps(args)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    victims = []
    try:
        deadline = time.time() + 60
        while not (partial.exists() and partial.stat().st_size >= 2 * 1024 * 1024):
            assert proc.poll() is None and time.time() < deadline, "the slow pull never wrote 2 MiB"
            time.sleep(0.05)
    finally:
        victims = _descendants(proc.pid) + [proc.pid]
        for pid in victims:  # the module's process among them: killed mid-transfer, no clean-up
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    assert len(victims) > 2, "the module's process was not found under ansible's: %s" % victims
    for dummy in range(100):  # gone (reaped by init once their parents died)
        if not any(os.path.exists("/proc/%d" % pid) and "zombie" not in _state(pid) for pid in victims):
            break
        time.sleep(0.1)
    kept = partial.stat().st_size
    time.sleep(1)
    assert partial.stat().st_size == kept, "the partial still grows after the kill"
    assert 0 < kept < SIZE and not dest.exists()
    assert partial.read_bytes() == shard["data"][:kept]
    assert oct(partial.stat().st_mode & 0o7777) == "0o600"
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["status"] == 206 and out["resumed_from"] == kept and out["bytes_fetched"] == SIZE - kept
    assert_in_place(dest, shard)
    assert nginx.lines(mark) == [("/" + NAME, "bytes=%d-" % kept, 206, SIZE - kept)]


def test_stale_partial_is_fetched_again_from_zero(nginx, shard, tmp_path):
    """A partial of other bytes (another version of the file): the resumed file fails its sha256,
    is removed, and the file is fetched once more from byte 0; dest only ever holds the right bytes."""
    dest = tmp_path / NAME
    dest.write_bytes(b"the previous version")
    partial_of(dest).write_bytes(os.urandom(HALF))
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["status"] == 200 and out["resumed_from"] == 0
    assert out["bytes_fetched"] == (SIZE - HALF) + SIZE
    assert len(out["restarts"]) == 1 and "stale" in out["restarts"][0] and "from byte %d" % HALF in out["restarts"][0]
    assert_in_place(dest, shard)
    assert nginx.lines(mark) == [("/" + NAME, "bytes=%d-" % HALF, 206, SIZE - HALF), ("/" + NAME, "-", 200, SIZE)]


def test_stale_partial_and_wrong_sha256_fails_once_retried(nginx, shard, tmp_path):
    """The retry from byte 0 happens once: a mirror file that never matches fails, dest untouched."""
    dest = tmp_path / NAME
    dest.write_bytes(b"the previous version")
    partial_of(dest).write_bytes(os.urandom(HALF))
    want = hashlib.sha256(b"another file").hexdigest()
    mark = nginx.mark()
    out = pull(nginx.url, dest, want)
    assert out.get("failed"), out
    assert want in out["msg"] and shard["sha256"] in out["msg"] and str(dest) in out["msg"]
    assert dest.read_bytes() == b"the previous version" and not partial_of(dest).exists()
    assert [row[2] for row in nginx.lines(mark)] == [206, 200]


def test_server_without_ranges_restarts_from_zero(plain_http, shard, tmp_path):
    """Python's http.server answers a Range request with 200 and the whole file: written from byte 0."""
    dest = tmp_path / NAME
    partial_of(dest).write_bytes(shard["data"][:HALF])
    del _NoRange.seen[:]
    out = pull(plain_http, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["status"] == 200 and out["resumed_from"] == 0 and out["bytes_fetched"] == SIZE
    assert len(out["restarts"]) == 1 and "ignored the range bytes=%d-" % HALF in out["restarts"][0]
    assert _NoRange.seen == ["bytes=%d-" % HALF]
    assert_in_place(dest, shard)


def test_wrong_sha256_fails_and_leaves_dest(nginx, shard, tmp_path):
    dest = tmp_path / NAME
    dest.write_bytes(b"the previous version")
    want = hashlib.sha256(b"another file").hexdigest()
    out = pull(nginx.url, dest, want)
    assert out.get("failed"), out
    assert "sha256 mismatch" in out["msg"] and str(dest) in out["msg"]
    assert want in out["msg"] and shard["sha256"] in out["msg"]
    assert out["restarts"] == [], "a transfer from byte 0 is not retried"
    assert dest.read_bytes() == b"the previous version" and not partial_of(dest).exists()


def test_range_past_the_end_416_restarts(nginx, shard, tmp_path):
    """Without size, a partial as long as the file asks for bytes past the end: nginx answers 416."""
    dest = tmp_path / NAME
    partial_of(dest).write_bytes(shard["data"])
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"], size=None)
    assert not out.get("failed"), out
    assert out["status"] == 200 and out["resumed_from"] == 0 and out["bytes_fetched"] == SIZE
    assert "416" in out["restarts"][0]
    assert [(r[1], r[2]) for r in nginx.lines(mark)] == [("bytes=%d-" % SIZE, 416), ("-", 200)]
    assert_in_place(dest, shard)


def test_complete_partial_moves_without_a_request(nginx, shard, tmp_path):
    """A partial of the full size (a run that stopped before the move): verified, moved, nothing fetched."""
    dest = tmp_path / NAME
    partial_of(dest).write_bytes(shard["data"])
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"])
    assert not out.get("failed"), out
    assert out["changed"] and out["status"] is None and out["bytes_fetched"] == 0 and out["resumed_from"] == SIZE
    assert nginx.lines(mark) == []
    assert_in_place(dest, shard)


def test_check_mode_writes_nothing(nginx, shard, tmp_path):
    dest = tmp_path / NAME
    partial = partial_of(dest)
    partial.write_bytes(shard["data"][:HALF])
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.iterdir())
    mark = nginx.mark()
    out = pull(nginx.url, dest, shard["sha256"], check=True)
    assert not out.get("failed"), out
    assert out["changed"] and out["resumed_from"] == HALF and out["bytes_fetched"] == 0
    assert "from byte %d" % HALF in out["msg"]
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.iterdir()) == before
    assert nginx.lines(mark) == []
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    out = pull(nginx.url, fresh / NAME, shard["sha256"], check=True)
    assert out["changed"] and out["resumed_from"] == 0 and list(fresh.iterdir()) == []


ROLE_PLAY = """
- name: The models role against the nginx mirror
  hosts: localhost
  gather_facts: false
  roles:
    - role: llmops.serving.models
"""
PULL_TASK = "Pull the files that differ from the mirror (sha256 checked before the file is moved in place)"


def test_role_resumes_a_pull_from_the_mirror(nginx, shard, tmp_path):
    """roles/models: a host holding half of a shard in its partial gets the rest only (206), through
    the role's pull task (url, dest, sha256 and size from the plan), and the copy verifies."""
    import json  # pylint: disable=import-outside-toplevel
    dest = tmp_path / "models" / "m"
    dest.mkdir(parents=True)
    partial_of(dest / NAME).write_bytes(shard["data"][:HALF])
    (tmp_path / "play.yml").write_text(ROLE_PLAY)
    extra = dict(models_list=[dict(name="m", source="http", url=nginx.url.rsplit("/", 1)[0] + "/")],
                 models_dir=str(tmp_path / "models"), models_state_dir=str(tmp_path / "state"),
                 models_owner=OWNER, models_group=GROUP, models_create_group=False, models_free_space_margin_bytes=0)
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    mark = nginx.mark()
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps(extra),
                           str(tmp_path / "play.yml")], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    pulled = [t for t in tasks if t["task"]["name"].endswith(PULL_TASK)]
    assert pulled, [t["task"]["name"] for t in tasks]
    pulled = pulled[0]["hosts"]["localhost"]["results"]
    assert [(r["item"]["path"], r["item"]["size"], r["status"], r["resumed_from"], r["bytes_fetched"]) for r in pulled] == [
        (NAME, SIZE, 206, HALF, SIZE - HALF)]
    assert nginx.lines(mark) == [("/SHA256SUMS", "-", 200, len((shard["www"] / "SHA256SUMS").read_bytes())),
                                 ("/" + NAME, "bytes=%d-" % HALF, 206, SIZE - HALF)]
    assert_in_place(dest / NAME, shard)
