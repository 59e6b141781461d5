# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""model_manifest and model_fetch on real files and a real HTTP server (http.server on loopback)."""
import functools
import hashlib
import http.server
import json
import os
import sys
import threading

import pytest
from module_args import patch_module_args

from ansible_collections.llmops.serving.plugins.modules import model_fetch, model_manifest


def _run(capsys, module, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def model(tmp_path):
    root = tmp_path / "tiny"
    (root / "tok").mkdir(parents=True)
    files = {"config.json": b'{"a": 1}', "model.safetensors": os.urandom(5000), "tok/tokenizer.json": b"{}"}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    sums = "".join("%s  %s\n" % (hashlib.sha256(d).hexdigest(), p) for p, d in sorted(files.items()))
    (root / "SHA256SUMS").write_text(sums)
    return root, files, sums


@pytest.fixture
def mirror(model):
    root = model[0]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d/" % httpd.server_address[1]
    httpd.shutdown()


def test_manifest_compute_then_check_a_copy(capsys, model, tmp_path):
    root, files, sums = model
    out = _run(capsys, model_manifest, path=str(root), ignore_patterns=["SHA256SUMS"])
    assert out["available"] and not out["changed"]
    assert [f["path"] for f in out["manifest"]["files"]] == sorted(files)
    # check the same tree against the mirror's SHA256SUMS: in sync; then break a file
    out = _run(capsys, model_manifest, path=str(root), sha256sums=sums)
    assert out["in_sync"] and out["transfer"] == [] and out["extra"] == ["SHA256SUMS"]
    (root / "config.json").write_bytes(b'{"a": 2}')
    out = _run(capsys, model_manifest, path=str(root), sha256sums=sums)
    assert not out["in_sync"] and out["transfer"] == ["config.json"]
    assert out["differences"][0]["reason"] == "sha256"
    missing = _run(capsys, model_manifest, path=str(tmp_path / "none"))
    assert missing["available"] is False and "not a directory" in missing["msg"]


def test_manifest_bad_input_fails(capsys, tmp_path):
    out = _run(capsys, model_manifest, path=str(tmp_path), manifest=[{"path": "../x", "sha256": "a" * 64}])
    assert out["failed"] and "must not contain" in out["msg"]


def test_fetch_http_mirror(capsys, model, mirror):
    root, files, sums = model
    out = _run(capsys, model_fetch, source="http", url=mirror, timeout=10)
    assert out["available"], out
    assert {f["path"]: f["size"] for f in out["manifest"]["files"]} == {p: len(d) for p, d in files.items()}
    # a file the SHA256SUMS lists but the mirror does not serve: data, named
    (root / "tok" / "tokenizer.json").unlink()
    out = _run(capsys, model_fetch, source="http", url=mirror, timeout=10)
    assert not out["available"] and out["reason"] == "missing_files" and out["missing"] == ["tok/tokenizer.json"]
    # declared manifest that disagrees with the mirror
    out = _run(capsys, model_fetch, source="http", url=mirror, timeout=10,
               manifest=[{"path": "config.json", "sha256": "0" * 64}])
    assert out["reason"] == "mismatch" and "config.json" in out["msg"]


def test_fetch_http_mirror_down_is_data(capsys):
    out = _run(capsys, model_fetch, source="http", url="http://127.0.0.1:9/", timeout=5)
    assert not out["available"] and out["reason"] == "mirror_unreachable"


def test_fetch_controller_dir_and_declared_manifest(capsys, model):
    root, files, sums = model
    out = _run(capsys, model_fetch, source="controller", path=str(root), allow_patterns=["*.json", "*.safetensors"])
    assert out["available"] and [f["path"] for f in out["manifest"]["files"]] == sorted(files)
    declared = [{"path": "config.json", "sha256": hashlib.sha256(files["config.json"]).hexdigest()},
                {"path": "model-00002.safetensors", "sha256": "1" * 64}]
    out = _run(capsys, model_fetch, source="controller", path=str(root), manifest=declared)
    assert not out["available"] and out["missing"] == ["model-00002.safetensors"]


def test_fetch_hub_without_client_is_data_and_token_stays_out(capsys):
    # The tools venv has no huggingface_hub: the real import fails in the child.
    out = _run(capsys, model_fetch, source="hf", repo_id="org/tiny", revision="main", python=sys.executable,
               token="hf_SECRETSECRET")
    assert not out["available"] and out["reason"] == "client_missing" and out["fix"] == "models_fetch_python (an interpreter with the client installed)"
    assert "hf_SECRETSECRET" not in json.dumps(out)
