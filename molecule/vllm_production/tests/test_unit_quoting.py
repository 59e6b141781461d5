"""systemd_quote against the real systemd of the node: a value with CR, LF or
other control characters stays ONE argument of ExecStart and never becomes a
directive (issue 13, unit injection). Also `systemd-analyze verify` of the
rendered units."""
import base64
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
import collection_path  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args  # noqa: E402

UNIT = "llmops-quote-test.service"
EVIL = [
    # The value: unquoted by the old systemd_quote (no blank), systemd
    # 252 then parsed User=root and ExecStartPre=+/bin/true (verify rc 0).
    "tiny\rUser=root\rExecStartPre=+/bin/true",
    "tiny\rUser=root\rExecStartPre=+/bin/touch /run/llmops-pwned",
    "tiny\nUser=root",
    "a\x0bb\x1bc\x7fd\u0085e",
]


def _load(host, text):
    blob = base64.b64encode(text.encode("utf-8")).decode("ascii")
    with host.sudo():
        host.check_output("echo %s | base64 -d > /run/systemd/system/%s" % (blob, UNIT))
        host.check_output("systemctl daemon-reload")
        verify = host.run("systemd-analyze verify /run/systemd/system/%s" % UNIT)
        # One property at a time: systemctl prints the argument's own CR/LF raw.
        show = dict((p, host.run("systemctl show %s -p %s --value" % (UNIT, p)).stdout)
                    for p in ("User", "ExecStartPre", "ExecStart"))
    return verify, show


@pytest.fixture
def cleanup(host):
    yield
    with host.sudo():
        host.run("rm -f /run/systemd/system/%s && systemctl daemon-reload" % UNIT)


@pytest.mark.parametrize("value", EVIL, ids=["cr-directives", "cr-quoted", "lf", "c0-del-c1"])
def test_control_characters_stay_one_argument(host, cleanup, value):
    exec_start = vllm_args.systemd_exec(["/bin/echo", value, "--port", "8000"])
    verify, props = _load(host, "[Service]\nType=oneshot\nExecStart=%s\n" % exec_start)
    assert props["User"].strip() == "", props
    assert props["ExecStartPre"].strip() == "", props
    # The whole value, control characters included, is one argument of ExecStart.
    assert ("argv[]=/bin/echo %s --port 8000" % value) in props["ExecStart"], props
    assert verify.rc == 0, verify.stderr
    assert "\r" not in exec_start and "\n" not in exec_start


def test_rendered_instance_units_verify(host):
    with host.sudo():
        for unit in ("vllm@a.service",):
            res = host.run("systemd-analyze verify %s" % unit)
            assert res.rc == 0, res.stderr
            cat = host.check_output("systemctl cat %s" % unit)
            assert "\r" not in cat
