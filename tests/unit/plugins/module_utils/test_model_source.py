# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Model declarations, the supply plan, transfers and drift rows."""
import pytest

from ansible_collections.llmops.serving.plugins.module_utils import model_source as ms

SHA = "b" * 64


def test_validate_all_sources_canonical():
    specs = ms.validate([
        dict(name="qwen", source="hf", repo_id="Qwen/Qwen3-0.6B", revision=" main "),
        dict(name="ms", source="modelscope", repo_id="qwen/Qwen3-0.6B", revision="master", allow_patterns="*.json"),
        dict(name="mir", source="http", url="http://mirror:8080/models/tiny"),
        dict(name="ctl", source="controller", path="/srv/src/tiny/", dest="/data/tiny"),
    ], "/srv/models/")
    assert specs[0]["dest"] == "/srv/models/qwen" and specs[0]["revision"] == "main"
    assert specs[1]["allow_patterns"] == ["*.json"]
    assert specs[2]["url"] == "http://mirror:8080/models/tiny/"
    assert specs[2]["manifest_url"] == "http://mirror:8080/models/tiny/SHA256SUMS"
    assert specs[3]["path"] == "/srv/src/tiny" and specs[3]["dest"] == "/data/tiny"


@pytest.mark.parametrize("entry,match", [
    (dict(name="a", source="s3", url="x"), r"models_list\[0\] \(a\)\.source must be one of hf, modelscope, http, controller"),
    (dict(name="a", source="hf", repo_id="org/x"), r"revision is required for source hf"),
    (dict(name="a", source="hf", model_id="org/x", revision="main"), r"model_id is not a key of a model; use repo_id"),
    (dict(name="a", source="http", url="ftp://x/"), r"\.url must be the http\(s\)://"),
    (dict(name="a", source="controller", path="rel/dir"), r"\.path must be an absolute directory"),
    (dict(name="a", source="controller", path="/x", url="http://y/"), r"url do not apply to source controller"),
    (dict(name="../a", source="controller", path="/x"), r"\.name must be a directory name"),
    (dict(name="a", source="controller", path="/x", manifest=[dict(path="../x", sha256=SHA)]), r"must not contain"),
    (dict(name="a", source="hf", repo_id="org/x", revision="main", token="hf_x"), r"token is not a key of a model; use models_hf_token"),
])
def test_validate_names_the_key_and_the_fix(entry, match):
    with pytest.raises(ms.ModelSpecError, match=match):
        ms.validate([entry], "/srv/models")


def test_validate_unique_names_and_dests():
    with pytest.raises(ms.ModelSpecError, match="already used"):
        ms.validate([dict(name="a", source="controller", path="/x")] * 2, "/m")
    with pytest.raises(ms.ModelSpecError, match="also the dest of a"):
        ms.validate([dict(name="a", source="controller", path="/x"),
                     dict(name="b", source="controller", path="/y", dest="/m/a")], "/m")


def test_hub_kwargs_real_client_names():
    assert ms.hub_kwargs("hf", "org/x", "main", ["*.json"], None, "/c", None) == dict(
        repo_id="org/x", revision="main", allow_patterns=["*.json"], cache_dir="/c")
    assert ms.hub_kwargs("modelscope", "org/x", "v1", local_dir="/d") == dict(model_id="org/x", revision="v1", local_dir="/d")


def _manifest(*paths):
    return dict(files=[dict(path=p, size=3, sha256=SHA) for p in paths], total_bytes=3 * len(paths))


def test_plan_fails_naming_every_unavailable_model_and_builds_sources():
    specs = ms.validate([dict(name="a", source="hf", repo_id="o/a", revision="v9"),
                         dict(name="b", source="http", url="http://m/b/")], "/m")
    bad = [dict(available=False, reason="not_cached", fix="revision", msg="no snapshot"),
           dict(available=True, manifest=_manifest("x"))]
    with pytest.raises(ms.ModelSpecError, match=r"a \(source hf\): not_cached - fix revision: no snapshot"):
        ms.plan(specs, bad)
    good = [dict(available=True, manifest=_manifest("config.json", "sub/w 1.bin"), path="/cache/snap/abc", resolved_revision="abc"),
            dict(available=True, manifest=_manifest("x"))]
    plan = ms.plan(specs, good)
    assert plan[0]["src"] == "/cache/snap/abc" and plan[1]["url"] == "http://m/b/"
    assert ms.dirs(plan) == ["/m/a", "/m/a/sub", "/m/b"]
    copies = [dict(transfer=["sub/w 1.bin"], differences=[dict(path="sub/w 1.bin", reason="sha256"),
                                                          dict(path="config.json", reason="mode", expected="0640", found="0600")]),
              dict(transfer=["x"], differences=[dict(path="x", reason="missing")])]
    moves = ms.transfers(plan, copies)
    assert moves["content"][0]["src"] == "/cache/snap/abc/sub/w 1.bin"
    assert moves["content"][1]["url"] == "http://m/b/x"
    assert [c["size"] for c in moves["content"]] == [3, 3]  # model_pull's size (the Range end it expects)
    assert moves["attrs"] == [dict(model="a", path="config.json", dest="/m/a/config.json")]
    rows = ms.drift_rows("h1", plan, copies)
    assert [(r["host"], r["component"], r["instance"], r["found"]) for r in rows] == [
        ("h1", "model_files", "a", "2 difference(s)"), ("h1", "model_files", "b", "1 difference(s)")]
    assert rows[0]["detail"][0].startswith("sub/w 1.bin: sha256")
    assert ms.drift_rows("h1", plan, [dict(differences=[]), dict(differences=[])]) == []
