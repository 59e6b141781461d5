# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Manifest rules on real files (a model-like directory written in tmp_path)."""
import hashlib
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import model_manifest as mm


def _write(root, rel, data):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def model(tmp_path):
    shas = {
        "config.json": _write(tmp_path, "config.json", b'{"model_type": "llama"}'),
        "model.safetensors": _write(tmp_path, "model.safetensors", os.urandom(70000)),
        "tokenizer/tokenizer.json": _write(tmp_path, "tokenizer/tokenizer.json", b"{}"),
    }
    # The hub client's bookkeeping and partial downloads are never part of a model.
    _write(tmp_path, ".cache/huggingface/download/model.safetensors.metadata", b"x")
    _write(tmp_path, "model.safetensors.incomplete", b"partial")
    # model_pull's partial downloads (.NAME.partial beside the file), at the top and below.
    _write(tmp_path, ".model.safetensors.partial", b"partial")
    _write(tmp_path, "tokenizer/.tokenizer.json.partial", b"partial")
    return tmp_path, shas


def test_compute_lists_files_sizes_and_sha256(model):
    root, shas = model
    man = mm.compute(str(root))
    assert [f["path"] for f in man["files"]] == ["config.json", "model.safetensors", "tokenizer/tokenizer.json"]
    assert {f["path"]: f["sha256"] for f in man["files"]} == shas
    assert man["total_bytes"] == sum(os.path.getsize(os.path.join(str(root), p)) for p in shas)


def test_patterns_select_and_ignore(model):
    root, dummy = model
    assert [f["path"] for f in mm.compute(str(root), ["*.json"])["files"]] == ["config.json", "tokenizer/tokenizer.json"]
    assert [f["path"] for f in mm.compute(str(root), ["*.json"], ["tokenizer/*"])["files"]] == ["config.json"]


def test_compare_in_sync_then_names_each_difference(model):
    root, dummy = model
    man = mm.compute(str(root))
    assert mm.compare(str(root), man)["differences"] == []
    with open(os.path.join(str(root), "model.safetensors"), "r+b") as f:  # same size, other bytes
        f.write(b"\0\0\0\0")
    os.remove(os.path.join(str(root), "config.json"))
    _write(root, "stray.bin", b"y")
    res = mm.compare(str(root), man)
    assert [(d["path"], d["reason"]) for d in res["differences"]] == [("config.json", "missing"), ("model.safetensors", "sha256")]
    assert res["extra"] == ["stray.bin"]
    sizes = {f["path"]: f["size"] for f in man["files"]}
    assert res["missing_bytes"] == sizes["config.json"] + sizes["model.safetensors"]
    assert mm.content_paths(res["differences"]) == ["config.json", "model.safetensors"]


def test_compare_size_without_reading_and_owner_mode(model):
    root, dummy = model
    man = mm.compute(str(root))
    with open(os.path.join(str(root), "config.json"), "ab") as f:
        f.write(b" ")
    os.chmod(os.path.join(str(root), "model.safetensors"), 0o600)
    res = mm.compare(str(root), man, mode="0640")
    reasons = {(d["path"], d["reason"]) for d in res["differences"]}
    assert ("config.json", "size") in reasons
    assert ("model.safetensors", "mode") in reasons
    assert mm.content_paths(res["differences"]) == ["config.json"]


def test_compare_missing_directory_needs_every_byte(model, tmp_path):
    root, dummy = model
    man = mm.compute(str(root))
    res = mm.compare(str(tmp_path / "nowhere"), man)
    assert len(res["differences"]) == 3 and res["missing_bytes"] == man["total_bytes"]


def test_normalize_forms_and_errors():
    sha = "a" * 64
    assert mm.normalize({"b": sha, "a": {"sha256": sha.upper(), "size": 3}})["files"] == [
        dict(path="a", size=3, sha256=sha), dict(path="b", size=None, sha256=sha)]
    with pytest.raises(mm.ManifestError, match=r"must not contain '\.\.'"):
        mm.normalize([dict(path="../etc/passwd", sha256=sha)])
    with pytest.raises(mm.ManifestError, match="relative"):
        mm.normalize([dict(path="/etc/passwd", sha256=sha)])
    with pytest.raises(mm.ManifestError, match="64 hex digits"):
        mm.normalize([dict(path="a", sha256="abc")])
    with pytest.raises(mm.ManifestError, match="size"):
        mm.normalize([dict(path="a", sha256=sha, size=-1)])
    with pytest.raises(mm.ManifestError, match="unknown key"):
        mm.normalize([dict(path="a", sha256=sha, md5="x")])
    with pytest.raises(mm.ManifestError, match="listed twice"):
        mm.normalize([dict(path="a", sha256=sha), dict(path="a", sha256=sha)])


def test_sha256sums_round_trip_and_real_sha256sum_output(model):
    root, shas = model
    man = mm.compute(str(root))
    text = mm.to_sha256sums(man)
    assert mm.parse_sha256sums(text)["files"] == [dict(f, size=None) for f in man["files"]]
    # GNU sha256sum's binary-mode marker
    assert mm.parse_sha256sums("%s *config.json\n" % shas["config.json"])["files"][0]["path"] == "config.json"
    with pytest.raises(mm.ManifestError, match="line 1"):
        mm.parse_sha256sums("not a checksum line\n")


def test_diff_manifests(model):
    root, dummy = model
    man = mm.compute(str(root))
    other = dict(files=[dict(f, sha256="0" * 64) if f["path"] == "config.json" else f for f in man["files"][1:]])
    assert mm.diff_manifests(man, other) == {"config.json": "missing"}
    assert mm.diff_manifests(man, man) == {}


def test_free_bytes_of_a_path_that_does_not_exist_yet(tmp_path):
    free, probe = mm.free_bytes(str(tmp_path / "a" / "b"))
    assert probe == str(tmp_path) and free > 0
