# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "flash_attn")


def _read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


# --- arch derivation -------------------------------------------------------------

@pytest.mark.parametrize("cc,arch", [
    ("8.0", "80"), ("8.6", "80"), ("8.7", "80"), ("8.9", "80"),   # A100, A10/3090, Orin, Ada run sm_80
    ("9.0", "90"),                                                 # H100/H200
    ("10.0", "100"), ("10.3", "100"),                              # Blackwell DC
    ("12.0", "120"), ("12.1", "120"),                              # Blackwell consumer/workstation
    ((9, 0), "90"), (9.0, "90"),
])
def test_arch_for_compute_capability(cc, arch):
    assert fa.arch_for_compute_capability(cc)[0] == arch


@pytest.mark.parametrize("cc", ["7.5", "7.0", "6.1"])
def test_below_8_is_skipped_with_reason(cc):
    arch, reason = fa.arch_for_compute_capability(cc)
    assert arch is None
    assert "< 8.0" in reason and cc in reason


def test_unknown_major_has_no_arch():
    arch, reason = fa.arch_for_compute_capability("11.0")
    assert arch is None and "flash_attn_cuda_archs" in reason


def test_h200_capture_derives_90():
    # Real capture: nvidia-smi CSV line of the H200 with compute_cap 9.0
    caps = []
    for line in _read("probe.txt").splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 9 and cols[1] == "NVIDIA H200" and re.match(r"^\d+\.\d+$", cols[8]):
            caps.append(cols[8])
    assert caps == ["9.0"]
    assert fa.derive_archs(caps) == dict(archs=["90"], skipped=[], reasons=["compute capability 9.0 -> 90"])


def test_mixed_gpus_sorted_union_and_skips():
    d = fa.derive_archs(["12.0", "9.0", "8.6", "9.0", "7.5", "8.0"])
    assert d["archs"] == ["80", "90", "120"]
    assert [s["compute_capability"] for s in d["skipped"]] == ["7.5"]


def test_all_below_8_gives_no_archs():
    assert fa.derive_archs(["7.5", "7.0"])["archs"] == []
    assert fa.derive_archs([])["archs"] == []


# --- override validation ------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    ("90", ["90"]), ("80;90", ["80", "90"]), ("90,80", ["80", "90"]), (["120", 90, "90"], ["90", "120"]),
    ([80], ["80"]),
])
def test_validate_archs_ok(value, expected):
    assert fa.validate_archs(value, "13.0") == expected


@pytest.mark.parametrize("value,fix", [
    ("80a", "write 80"), ("sm_90", "write 90"), ("compute_90", "write 90"), ("sm_80a", "write 80"),
    ("86", "write 80"), ("8.6", "write 80"), ("9.0", "write 90"), ("89", "write 80"), ("75", "80, 90, 100, 120"),
])
def test_validate_archs_rejects_with_fix(value, fix):
    with pytest.raises(fa.FlashAttnError) as e:
        fa.validate_archs([value])
    msg = str(e.value)
    assert "flash_attn_cuda_archs" in msg and repr(value) in msg and fix in msg


@pytest.mark.parametrize("archs", [["100"], ["90", "120"]])
def test_blackwell_archs_need_cuda_12_8(archs):
    with pytest.raises(fa.FlashAttnError) as e:
        fa.validate_archs(archs, "12.4")
    assert "12.8" in str(e.value)
    assert fa.validate_archs(archs, "12.8") == archs
    assert fa.validate_archs(archs, "13.0") == archs


def test_empty_override_is_an_error():
    for v in ("", [], " ; "):
        with pytest.raises(fa.FlashAttnError):
            fa.validate_archs(v)


# --- MAX_JOBS / NVCC_THREADS ---------------------------------------------------------

def test_max_jobs_h200_figures():
    # H200 probe (real): 16 cores, 125 GB available -> memory bounds it at 13
    assert fa.max_jobs(16, 125) == 13
    assert fa.max_jobs(16, 125, per_job_gb=4.3) == 16        # measured ~69 GB peak / 16 jobs
    assert fa.max_jobs(16, 128) == 14


@pytest.mark.parametrize("cores,mem,per,expected", [
    (2, 18.9, 9, 2), (2, 4, 9, 1), (64, 64, 9, 7), (8, 1000, 9, 8), (1, 0.5, 9, 1), (0, 100, 9, 1),
])
def test_max_jobs_rule(cores, mem, per, expected):
    assert fa.max_jobs(cores, mem, per) == expected


def test_max_jobs_rejects_bad_per_job():
    with pytest.raises(fa.FlashAttnError):
        fa.max_jobs(16, 128, 0)


def test_nvcc_threads():
    assert fa.nvcc_threads(["90"]) == 1
    assert fa.nvcc_threads(["80", "90", "100", "120"]) == 4
    assert fa.nvcc_threads(["80", "90"], jobs=13, cores=16) == 1
    assert fa.nvcc_threads(["80", "90", "100"], jobs=4, cores=16) == 3


# --- build key ----------------------------------------------------------------------

H200 = dict(flash_attn_version="2.8.3.post2", torch_version="2.11.0+cu130", cuda_version="13.0",
            python_abi="cp312", archs=["90"], cxx11_abi=True)


def test_build_key_readable_and_stable():
    k = fa.build_key(**H200)
    assert k["string"] == "flash-attn-2.8.3.post2_torch-2.11.0+cu130_cuda-13.0_cp312_sm90_cxx11abi-1"
    assert re.match(r"^[0-9a-f]{64}$", k["id"])
    assert fa.build_key(**_with(H200, "archs", ["90", "90"]))["id"] == k["id"]
    assert fa.build_key(**_with(H200, "cxx11_abi", "True"))["id"] == k["id"]


def _with(base, key, value):
    """A copy of ``base`` with one key replaced."""
    out = dict(base)
    out[key] = value
    return out


@pytest.mark.parametrize("field,value", [
    ("flash_attn_version", "2.8.2"), ("torch_version", "2.11.0+cu128"), ("cuda_version", "12.8"),
    ("python_abi", "cp311"), ("archs", ["80", "90"]), ("cxx11_abi", False),
])
def test_every_field_changes_the_key(field, value):
    assert fa.build_key(**dict(H200, **{field: value}))["id"] != fa.build_key(**H200)["id"]


# --- progress / cubins ----------------------------------------------------------------

def test_progress_from_build_log():
    p = fa.parse_progress(_read("build-log-partial.txt"))
    assert (p["built"], p["total"], p["percent"]) == (37, 73, 50.7)
    assert p["line"].startswith("[37/73] /usr/local/cuda/bin/nvcc")
    assert fa.progress_message("gpu1", p, 612) == "flash-attn build on gpu1: 37/73 objects (50.7%), 612 s elapsed"


def test_progress_before_ninja_and_ignores_inline_brackets():
    assert fa.parse_progress("  Running command python setup.py bdist_wheel\n")["total"] is None
    assert fa.parse_progress("  [3/73] nvcc\n  warning: [0/1] x\n")["built"] == 3
    assert "preparing" in fa.progress_message("h", fa.parse_progress(""))


def test_list_elf_counts_h200():
    cubins = fa.parse_list_elf(_read("cuobjdump-list-elf-sm90.txt"))
    assert cubins == {"90": 72}
    assert fa.missing_archs(["90"], cubins) == []
    assert fa.missing_archs(["80", "90"], cubins) == ["80"]


# --- cache hit/miss plan ----------------------------------------------------------------

def test_plan_one_builder_per_key_first_in_play_order():
    plan = fa.build_plan([("g3", "kA"), ("g1", "kA"), ("a1", "kB"), ("cpu", None), ("g2", "kA")])
    assert plan["builders"] == {"kA": "g3", "kB": "a1"}
    assert plan["hosts"] == {"g3": "build", "g1": "install", "a1": "build", "cpu": "skip", "g2": "install"}
    assert plan["misses"] == ["kA", "kB"] and plan["hits"] == []


def test_plan_cached_key_builds_nothing():
    plan = fa.build_plan([("g1", "kA"), ("g2", "kA"), ("a1", "kB")], cached_keys={"kA"})
    assert plan["builders"] == {"kB": "a1"}
    assert plan["hosts"]["g1"] == "install" and plan["hosts"]["g2"] == "install"
    assert plan["hits"] == ["kA"] and plan["misses"] == ["kB"]
    assert fa.build_plan([("g1", "kA")], cached_keys={"kA"})["builders"] == {}


def test_needs_install():
    assert not fa.needs_install("2.8.3.post2", "k", "2.8.3.post2", "k")
    assert fa.needs_install("2.8.3.post2", "other", "2.8.3.post2", "k")
    assert fa.needs_install("2.8.2", "k", "2.8.3.post2", "k")
    assert fa.needs_install(None, None, "2.8.3.post2", "k")


def test_sha256_file_and_wheel_name():
    h = "a" * 64
    assert fa.parse_sha256_file("%s  flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl\n" % h.upper()) == h
    assert fa.parse_sha256_file("not a digest") is None
    assert fa.wheel_name_ok("flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl", "2.8.3.post2")
    assert not fa.wheel_name_ok("flash_attn-2.8.2-cp312-cp312-linux_x86_64.whl", "2.8.3.post2")


# --- CLI used by scripts/h200/flash-attn-build.sh and the probe script ------------------

def _cli(*args):
    path = fa.__file__
    return subprocess.run([sys.executable, path] + list(args), capture_output=True, text=True, check=False)


def test_cli_matches_library():
    assert _cli("max-jobs", "16", "125").stdout.strip() == "13"
    assert _cli("derive", "9.0", "7.5").stdout.strip() == "90"
    r = _cli("archs", "80a")
    assert r.returncode == 1 and "write 80" in r.stderr
    key = json.loads(_cli("key", "2.8.3.post2", "2.11.0+cu130", "13.0", "cp312", "90", "True").stdout)
    assert key == fa.build_key(**H200)


def test_probe_script_runs_without_torch_or_flash_attn(tmp_path):
    r = subprocess.run([sys.executable, "-c", fa.PROBE_SCRIPT, json.dumps({"numeric_check": True})],
                       capture_output=True, text=True, cwd=str(tmp_path), check=False)
    facts = fa.parse_probe_output(r.stdout)
    assert facts["python_tag"] == "cp%d%d" % sys.version_info[:2]
    assert facts["numeric"]["ran"] is False and "error" in facts["numeric"]
